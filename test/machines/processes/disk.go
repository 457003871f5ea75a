package processes

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/clusterforge/clusterforge/components/machine"
	"github.com/clusterforge/clusterforge/test/machines"
	"github.com/clusterforge/clusterforge/test/standin/disk"
)

// etcdDiskProcess is the disk stand-in's process as the rehearsal names it: the unit it stands
// in for, without the suffix.
var etcdDiskProcess = strings.TrimSuffix(machine.EtcdDiskUnit, ".service")

// mountEtcdDisk does what etcd-disk.service does on Azure, mount a disk of the member's own at
// its data dir: here the disk stand-in, over a directory of its own on tmpfs, whose flushes take
// EtcdFsyncLatency.
func (r *Rehearsal) mountEtcdDisk(ctx context.Context, in machines.Instance) error {
	if p := r.Proc(in.Name, etcdDiskProcess); p != nil && p.Alive() {
		return nil
	}
	mountpoint := filepath.Join(r.Root(in.Name), machine.EtcdDataDir)
	// A disk stand-in that was killed leaves its mount behind, unusable.
	_ = syscall.Unmount(mountpoint, syscall.MNT_DETACH)
	backing := filepath.Join(r.disks(), in.Name)
	for _, dir := range []string{backing, mountpoint} {
		if err := os.MkdirAll(dir, 0o700); err != nil {
			return err
		}
	}
	argv := append(slices.Clone(r.Self), disk.Command, "--backing="+backing, "--mount="+mountpoint, "--fsync-latency="+r.EtcdFsyncLatency.String())
	proc, err := machines.StartProcess(argv, os.Environ(), r.Dir, r.Log(in.Name, etcdDiskProcess))
	if err != nil {
		return err
	}
	proc.Machine, proc.Name = in.Name, etcdDiskProcess
	if err := r.track(proc); err != nil {
		return err
	}
	return machines.Poll(ctx, 10*time.Second, in.Name+" "+etcdDiskProcess, func(context.Context) error {
		if !proc.Alive() {
			return machines.Permanent{Err: fmt.Errorf("exited: %v (log: %s)", proc.Err(), r.Log(in.Name, etcdDiskProcess))}
		}
		if !mounted(mountpoint) {
			return errors.New(mountpoint + " not mounted yet")
		}
		return nil
	})
}

// disks holds the disk stand-ins' files: on tmpfs, so that a flush costs the stated latency and
// nothing of this machine's disk.
func (r *Rehearsal) disks() string { return filepath.Join("/dev/shm", r.hostName()) }

// mounted is whether dir is on another file system than its parent.
func mounted(dir string) bool {
	var here, parent syscall.Stat_t
	return syscall.Stat(dir, &here) == nil && syscall.Stat(filepath.Dir(dir), &parent) == nil && here.Dev != parent.Dev
}
