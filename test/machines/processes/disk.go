package processes

import (
	"context"
	"errors"
	"fmt"
	"io"
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
// its data dir: here the disk stand-in, over a directory of its own on the rehearsal's tmpfs,
// whose flushes take EtcdFsyncLatency.
func (r *Rehearsal) mountEtcdDisk(ctx context.Context, in machines.Instance) error {
	if p := r.Proc(in.Name, etcdDiskProcess); p != nil && p.Alive() {
		return nil
	}
	mountpoint := filepath.Join(r.Root(in.Name), machine.EtcdDataDir)
	// A disk stand-in that was killed leaves its mount behind, unusable.
	if err := machines.DetachMounts(mountpoint); err != nil {
		return err
	}
	backing, err := r.diskBacking(in.Name)
	if err != nil {
		return err
	}
	if err := os.MkdirAll(mountpoint, 0o700); err != nil {
		return err
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
		if !machines.Mounted(mountpoint) {
			return errors.New(mountpoint + " not mounted yet")
		}
		return nil
	})
}

// StopDir stops every process of the rehearsal in dir, this one's or another's (its endpoints
// file), and detaches what it mounted: the disk stand-ins and their tmpfs, whose data goes with
// them; a stand-in that was killed leaves a dead mount behind.
func StopDir(dir string, progress io.Writer) error {
	if err := machines.StopProcesses(dir, progress); err != nil {
		return err
	}
	return machines.DetachMounts(dir)
}

// diskBacking is the directory holding a machine's disk, on a tmpfs the rehearsal mounts at
// <dir>/disks (so a flush costs the stated latency and nothing of this machine's disk), and which
// goes when it stops (DetachMounts).
func (r *Rehearsal) diskBacking(machineName string) (string, error) {
	r.disksMu.Lock()
	defer r.disksMu.Unlock()
	disks := filepath.Join(r.Dir, "disks")
	if err := os.MkdirAll(disks, 0o700); err != nil {
		return "", err
	}
	if !machines.Mounted(disks) {
		if err := syscall.Mount("tmpfs", disks, "tmpfs", 0, "mode=0700"); err != nil {
			return "", &os.PathError{Op: "mount tmpfs", Path: disks, Err: err}
		}
	}
	backing := filepath.Join(disks, machineName)
	return backing, os.MkdirAll(backing, 0o700)
}
