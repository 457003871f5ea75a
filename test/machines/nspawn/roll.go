package nspawn

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
	"github.com/clusterforge/clusterforge/test/machines"
	"github.com/clusterforge/clusterforge/test/machines/pulumilocal"
)

// RollTarget is booted machines as a roll acts on them (roll.Target). A replaced machine is
// shut down by its systemd, gets a new OS disk (its image under an empty overlay) and a new local
// disk, and boots from the desired plan's user-data, as a new Azure VM boots from the scale set's
// new model. The image stays the one the boot unpacked: a roll onto another image needs a boot of
// that image.
type RollTarget struct {
	*Booted
	desired *spec.Cluster
	// planDir is the desired spec's plan (build/plan/<env>): the user-data new machines boot from.
	planDir string
}

var _ roll.Target = (*RollTarget)(nil)

// RollTo prepares a roll of the booted machines to desired, planned into planDir.
func (b *Booted) RollTo(desired *spec.Cluster, planDir string) *RollTarget {
	return &RollTarget{Booted: b, desired: desired, planDir: planDir}
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
func (t *RollTarget) TakeOutOfRotation(ctx context.Context, name string) error {
	_, err := t.Exec(ctx, name, "systemctl", "stop", "--no-block", machine.APIServerUnit)
	return err
}

// errEtcdNotRolled refuses, before any member is stopped or removed, a roll that would replace
// booted etcd members: that path (stop, remove through the others, new disks, etcd-join) is
// drilled on the process rehearsal (TestRollDrills), not on booted machines.
var errEtcdNotRolled = errors.New("booted etcd members are not rolled: roll etcd on the process rehearsal (make rehearse, make roll) or on Azure")

// StopEtcd refuses: see errEtcdNotRolled.
func (t *RollTarget) StopEtcd(context.Context, string) error { return errEtcdNotRolled }

// Replace reimages the machine.
func (t *RollTarget) Replace(ctx context.Context, name string) error { return t.reimage(ctx, name) }

// reimage shuts a machine down, gives it new disks and boots it, as Azure reimages an instance; it
// returns once cloud-init has finished without errors. Etcd members are refused.
func (b *Booted) reimage(ctx context.Context, name string) error {
	m, err := b.Machine(name)
	if err != nil {
		return err
	}
	if m.Role == spec.RoleEtcdMain || m.Role == spec.RoleEtcdEvents {
		return errEtcdNotRolled
	}
	if err := b.StopMachine(ctx, name, false); err != nil {
		return err
	}
	if err := b.newDisks(m); err != nil {
		return fmt.Errorf("%s: new disks: %w", name, err)
	}
	if err := b.StartMachine(ctx, name); err != nil {
		return err
	}
	return b.waitCloudInit(ctx, name)
}

// newDisks replaces a stopped machine's OS disk (an empty overlay over its image, seeded with
// the current user-data) and its local disk (a new empty file).
func (b *Booted) newDisks(m *Machine) error {
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
	return machines.WriteFile(filepath.Join(m.Root, path), string(content), mode)
}

// FreshBackup and BackupNow are asked for only before the main etcd is touched: they refuse.
func (t *RollTarget) FreshBackup(context.Context) error { return errEtcdNotRolled }
func (t *RollTarget) BackupNow(context.Context) error   { return errEtcdNotRolled }

// Prepare refuses a change that rolls etcd members, then makes the desired plan the model new
// machines boot from and applies its add-ons.
func (t *RollTarget) Prepare(ctx context.Context) error {
	for _, role := range change.RolledRoles(t.desired, change.Diff(t.Cluster, t.desired)) {
		if role == spec.RoleEtcdMain || role == spec.RoleEtcdEvents {
			return fmt.Errorf("%s: %w", role, errEtcdNotRolled)
		}
	}
	t.Cluster, t.opts.PlanDir = t.desired, t.planDir
	stackFile, err := pulumilocal.StackFile(t.desired)
	if err != nil {
		return err
	}
	return t.applyAddons(ctx, stackFile)
}

// Commit has nothing left to record: the boot keeps no applied spec of its own.
func (t *RollTarget) Commit(context.Context) error { return nil }
