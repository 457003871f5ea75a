package processes

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"time"

	"github.com/clusterforge/clusterforge/components/etcdbackup"
	"github.com/clusterforge/clusterforge/components/machine"
	"github.com/clusterforge/clusterforge/components/spec"
	"github.com/clusterforge/clusterforge/components/wellknown"
	"github.com/clusterforge/clusterforge/test/machines"
)

// etcdBackupCommand runs clusterforge-etcd-backup on a machine of the main etcd, with its files and
// environment, as an operator's run command would on Azure; output goes to the machine's log.
func (r *Rehearsal) etcdBackupCommand(ctx context.Context, in machines.Instance, verb string, args ...string) error {
	argv := append([]string{r.onMachine(in, machine.EtcdBackupBinary), verb, "--config=" + r.onMachine(in, machine.EtcdBackupConfig)}, args...)
	log, err := os.OpenFile(r.Log(in.Name, "etcd-backup-"+verb), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	defer log.Close()
	cmd := exec.CommandContext(ctx, argv[0], argv[1:]...)
	cmd.Env = append(os.Environ(), etcdbackup.ConnectionStringEnv+"="+r.StoreConnectionString())
	cmd.Stdout, cmd.Stderr = log, log
	if err := cmd.Run(); err != nil {
		out, _ := os.ReadFile(log.Name())
		return fmt.Errorf("%s: clusterforge-etcd-backup %s: %v\n%s", in.Name, verb, err, lastLines(string(out), 5))
	}
	return nil
}

// EtcdGate asks `clusterforge-etcd-backup gate` on a main etcd member whether etcd may be touched
// now (etcdbackup.SafeToTouch), as a rolling change does before it starts.
func (r *Rehearsal) EtcdGate(ctx context.Context) error {
	return r.etcdBackupCommand(ctx, r.Of(spec.RoleEtcdMain)[0], "gate")
}

// DefragEtcd runs `clusterforge-etcd-backup defrag` with args on a main etcd member, as an operator
// does, and returns what it logged.
func (r *Rehearsal) DefragEtcd(ctx context.Context, args ...string) (string, error) {
	in := r.Of(spec.RoleEtcdMain)[0]
	path := r.Log(in.Name, "etcd-backup-defrag")
	var before int64
	if info, err := os.Stat(path); err == nil {
		before = info.Size()
	}
	err := r.etcdBackupCommand(ctx, in, "defrag", args...)
	out, _ := os.ReadFile(path)
	return string(out[min(before, int64(len(out))):]), err
}

// BackupEtcd takes a snapshot of the main etcd now, through the first member that answers.
func (r *Rehearsal) BackupEtcd(ctx context.Context) (etcdbackup.Snapshot, error) {
	store, err := r.BackupStore()
	if err != nil {
		return etcdbackup.Snapshot{}, err
	}
	var errs []error
	for _, in := range r.Of(spec.RoleEtcdMain) {
		err := r.etcdBackupCommand(ctx, in, "snapshot", fmt.Sprintf("--endpoint=https://%s:%d", in.IP, wellknown.EtcdClientPort))
		if err == nil {
			return store.Find(ctx, "")
		}
		errs = append(errs, err)
	}
	return etcdbackup.Snapshot{}, fmt.Errorf("no member took a snapshot: %v", errs)
}

// Restored is the snapshot a restore used and how long each of its steps took.
type Restored struct {
	etcdbackup.Snapshot
	// Rebuild is every member's download and rebuild, one after another (on Azure each member
	// rebuilds on its own machine); Start is the members started until healthy; Replay is the
	// deltas replayed and the stale keys cleared; APIServers is the apiserver machines started
	// until every apiserver, controller-manager and scheduler and the load balancer answer.
	Rebuild, Start, Replay, APIServers time.Duration
}

// RestoreEtcd restores every main etcd member from a snapshot (the latest verified when name is
// empty), machine by machine as on Azure: the apiserver machines stopped, the members stopped,
// each member rebuilt with a fresh cluster token (the download verified before anything
// changes), the members started, what the restore leaves stale cleared, the apiservers started.
func (r *Rehearsal) RestoreEtcd(ctx context.Context, name string) (Restored, error) {
	snap, err := r.findSnapshot(ctx, name)
	if err != nil {
		return Restored{Snapshot: snap}, err
	}
	apiservers := r.Of(spec.RoleAPIServer)
	r.logf("restoring %s from %s (revision %d); stopping the apiserver machines first", spec.RoleEtcdMain, snap.Name, snap.Revision)
	for _, in := range apiservers {
		if err := r.StopMachine(ctx, in.Name, false); err != nil {
			return Restored{Snapshot: snap}, err
		}
	}
	restored, err := r.restoreMembers(ctx, snap)
	if err != nil {
		return restored, err
	}
	r.logf("starting the apiserver machines")
	began := time.Now()
	if err := r.bootAll(ctx, apiservers); err != nil {
		return restored, err
	}
	err = r.WaitAPIHealthy(ctx)
	restored.APIServers = time.Since(began)
	return restored, err
}

// RestoreStopped restores the main etcd of a rehearsal that is not running (after a total loss
// found by `rehearse up`): the store started, the members rebuilt, started until healthy and
// cleared of stale leases, then everything stopped again for the next `rehearse up`.
func RestoreStopped(ctx context.Context, p *Layout, name string, progress io.Writer) (snap etcdbackup.Snapshot, err error) {
	if p.fresh {
		return snap, fmt.Errorf("%s holds no rehearsal to restore (no identity.json): start one with make rehearse", p.Dir)
	}
	if err := StopDir(p.Dir, progress); err != nil {
		return snap, err
	}
	r := &Rehearsal{Layout: p, progress: progress}
	defer func() { err = errors.Join(err, r.Down()) }()
	if err := r.prepare(); err != nil {
		return snap, err
	}
	if err := r.StartStore(ctx); err != nil {
		return snap, err
	}
	if snap, err = r.findSnapshot(ctx, name); err != nil {
		return snap, err
	}
	r.logf("restoring %s from %s (revision %d)", spec.RoleEtcdMain, snap.Name, snap.Revision)
	_, err = r.restoreMembers(ctx, snap)
	return snap, err
}

func (r *Rehearsal) findSnapshot(ctx context.Context, name string) (etcdbackup.Snapshot, error) {
	store, err := r.BackupStore()
	if err != nil {
		return etcdbackup.Snapshot{}, err
	}
	return store.Find(ctx, name)
}

// restoreMembers stops the main etcd's members, rebuilds each from snap with one new token,
// starts them, waits until they are healthy, replays the deltas stored after snap and clears
// the stale leases.
func (r *Rehearsal) restoreMembers(ctx context.Context, snap etcdbackup.Snapshot) (Restored, error) {
	restored := Restored{Snapshot: snap}
	members := r.Of(spec.RoleEtcdMain)
	for _, in := range members {
		if p := r.Proc(in.Name, "etcd"); p != nil {
			if err := p.Stop(syscall.SIGTERM, 10*time.Second); err != nil {
				return restored, err
			}
		}
	}
	began := time.Now()
	token := fmt.Sprintf("%s-restored-%s", spec.RoleEtcdMain, began.UTC().Format("20060102T150405Z"))
	for _, in := range members {
		err := r.etcdBackupCommand(ctx, in, "restore", "--snapshot="+snap.Name, "--name="+in.Name,
			fmt.Sprintf("--peer-url=https://%s:%d", in.IP, wellknown.EtcdPeerPort), "--token="+token)
		if err != nil {
			return restored, err
		}
	}
	restored.Rebuild = time.Since(began)
	r.logf("%d members rebuilt (token %s) in %s; starting them", len(members), token, restored.Rebuild.Round(time.Second))
	began = time.Now()
	if err := r.bootAll(ctx, members); err != nil {
		return restored, err
	}
	if err := r.WaitEtcdHealthy(ctx, spec.RoleEtcdMain); err != nil {
		return restored, err
	}
	restored.Start = time.Since(began)
	began = time.Now()
	if err := r.etcdBackupCommand(ctx, members[0], "replay"); err != nil {
		return restored, err
	}
	if report, err := os.ReadFile(r.Log(members[0].Name, "etcd-backup-replay")); err == nil {
		r.logf("%s", lastLines(string(report), 1))
	}
	cli, err := r.EtcdClient(spec.RoleEtcdMain)
	if err != nil {
		return restored, err
	}
	defer cli.Close()
	cleared, err := etcdbackup.ClearStale(ctx, cli)
	if err != nil {
		return restored, err
	}
	restored.Replay = time.Since(began)
	r.logf("cleared %d stale keys (master leases, apiserver identity leases)", cleared)
	return restored, nil
}

// lastLines is the end of a log, for an error message.
func lastLines(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	return strings.Join(lines[max(0, len(lines)-n):], "\n")
}
