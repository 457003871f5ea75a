package rehearsal

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"golang.org/x/sys/unix"

	"github.com/clusterforge/clusterforge/components/change"
	"github.com/clusterforge/clusterforge/components/machine"
	"github.com/clusterforge/clusterforge/components/roll"
	"github.com/clusterforge/clusterforge/components/spec"
)

// BootRollTarget is booted machines as a roll acts on them (roll.Target). A replaced machine is
// shut down by its systemd, gets a new OS disk (its image under an empty overlay) and a new local
// disk, and boots from the desired plan's user-data, as a new Azure VM boots from the scale set's
// new model. The image stays the one the boot unpacked: a roll onto another image needs a boot of
// that image.
type BootRollTarget struct {
	*Booted
	desired *spec.Cluster
	// planDir is the desired spec's plan (build/plan/<env>): the user-data new machines boot from.
	planDir string
}

var _ roll.Target = (*BootRollTarget)(nil)

// RollTo prepares a roll of the booted machines to desired, planned into planDir.
func (b *Booted) RollTo(desired *spec.Cluster, planDir string) *BootRollTarget {
	return &BootRollTarget{Booted: b, desired: desired, planDir: planDir}
}

// Inventory lists the control-plane machines and the nodes of every pool: workers count by
// their nodes, as everywhere else.
func (b *Booted) Inventory(ctx context.Context) (change.Inventory, error) {
	inv := change.Inventory{}
	for _, m := range b.Machines {
		if m.Image == machine.ImageControlPlane {
			inv[m.Role] = append(inv[m.Role], m.Name)
		}
	}
	return roll.AddNodes(ctx, b, inv)
}

// TakeOutOfRotation stops kube-apiserver as a shutdown would: it fails /readyz at once and
// serves through its shutdown delay, so the load balancer's probe takes it out.
func (t *BootRollTarget) TakeOutOfRotation(ctx context.Context, name string) error {
	_, err := t.Exec(ctx, name, "systemctl", "stop", "--no-block", machine.APIServerUnit)
	return err
}

// StopEtcd stops the member's etcd unit.
func (t *BootRollTarget) StopEtcd(ctx context.Context, name string) error {
	_, err := t.Exec(ctx, name, "systemctl", "stop", machine.EtcdUnit)
	return err
}

// Replace shuts the machine down, gives it new disks and boots it; it returns once cloud-init
// has finished without errors.
func (t *BootRollTarget) Replace(ctx context.Context, name string) error {
	m, err := t.Machine(name)
	if err != nil {
		return err
	}
	if err := t.Stop(name, false); err != nil {
		return err
	}
	if err := t.newDisks(m); err != nil {
		return fmt.Errorf("%s: new disks: %w", name, err)
	}
	if err := t.StartMachine(ctx, name); err != nil {
		return err
	}
	return t.WaitCloudInit(ctx, name)
}

// newDisks replaces a stopped machine's OS disk (an empty overlay over its image, seeded with
// the current user-data) and its local disk (a new empty file).
func (b *Booted) newDisks(m *BootedMachine) error {
	if err := unix.Unmount(m.Root, 0); err != nil && !errors.Is(err, unix.EINVAL) {
		return fmt.Errorf("unmount the OS disk: %w", err)
	}
	if err := b.detachDisk(m); err != nil {
		return err
	}
	dir := b.machineDir(m)
	for _, d := range []string{"upper", "work"} {
		if err := removeTree(filepath.Join(dir, d)); err != nil {
			return err
		}
	}
	return b.create(m)
}

// WriteOSDisk writes a file onto a stopped machine's OS disk, where its next boot finds it.
func (b *Booted) WriteOSDisk(name, path string, content []byte, mode os.FileMode) error {
	m, err := b.stopped(name)
	if err != nil {
		return err
	}
	return writeFile(filepath.Join(m.Root, path), string(content), mode)
}

// FreshBackup runs clusterforge-etcd-backup gate on a main member, as the Azure target does.
func (t *BootRollTarget) FreshBackup(ctx context.Context) error { return t.onMainMember(ctx, "gate") }

// BackupNow takes and verifies a snapshot on a main member.
func (t *BootRollTarget) BackupNow(ctx context.Context) error {
	return t.onMainMember(ctx, "snapshot")
}

// onMainMember runs clusterforge-etcd-backup on the first main member that succeeds, with the
// backup store the boot's drop-in gives its units (deviation "backup store").
func (t *BootRollTarget) onMainMember(ctx context.Context, verb string) error {
	var errs []error
	for _, in := range t.Of(spec.RoleEtcdMain) {
		argv := []string{"env", "AZURE_STORAGE_CONNECTION_STRING=" + t.StoreConnectionString(), machine.EtcdBackupBinary, verb, "--config=" + machine.EtcdBackupConfig}
		if verb == "snapshot" {
			argv = append(argv, fmt.Sprintf("--endpoint=https://%s:%d", in.IP, spec.EtcdClientPort))
		}
		_, err := t.Exec(ctx, in.Name, argv...)
		if err == nil {
			return nil
		}
		errs = append(errs, err)
	}
	return fmt.Errorf("clusterforge-etcd-backup %s: %w", verb, errors.Join(errs...))
}

// Prepare makes the desired plan the model new machines boot from, and applies its add-ons.
func (t *BootRollTarget) Prepare(ctx context.Context) error {
	t.Cluster, t.opts.PlanDir = t.desired, t.planDir
	return t.applyAddons(ctx)
}

// Commit has nothing left to record: the boot keeps no applied spec of its own.
func (t *BootRollTarget) Commit(context.Context) error { return nil }
