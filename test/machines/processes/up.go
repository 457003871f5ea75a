package processes

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/clusterforge/clusterforge/components/etcdbackup"
	"github.com/clusterforge/clusterforge/components/machine"
	"github.com/clusterforge/clusterforge/components/pki"
	"github.com/clusterforge/clusterforge/components/spec"
	"github.com/clusterforge/clusterforge/components/wellknown"
	"github.com/clusterforge/clusterforge/test/machines"
)

// Rehearsal is a running rehearsal: the plan and the processes it started.
type Rehearsal struct {
	*Layout
	progress io.Writer

	mu      sync.Mutex
	procs   []*machines.Proc
	closing atomic.Bool
	// disksMu makes the etcd members' disk stand-ins, booted together, mount one tmpfs.
	disksMu sync.Mutex
}

// Up starts the plan's control plane and simulated nodes, returning once all of it is healthy.
// On failure everything it started is stopped again.
func Up(ctx context.Context, p *Layout, progress io.Writer) (r *Rehearsal, err error) {
	if err := StopDir(p.Dir, progress); err != nil {
		return nil, err
	}
	r = &Rehearsal{Layout: p, progress: progress}
	defer func() {
		if err != nil {
			r.logf("failed: %v; stopping what was started", err)
			_ = r.Down()
			r = nil
		}
	}()
	began := time.Now()
	if err := r.prepare(); err != nil {
		return r, err
	}
	r.logf("starting the backup store (Azurite on %s, data in %s)", r.StoreAddress(), r.StoreDir())
	if err := r.StartStore(ctx); err != nil {
		return r, err
	}
	etcds := append(p.Of(spec.RoleEtcdMain), p.Of(spec.RoleEtcdEvents)...)
	r.logf("booting %d etcd members (%d main, %d events)", len(etcds), len(p.Of(spec.RoleEtcdMain)), len(p.Of(spec.RoleEtcdEvents)))
	if err := r.bootEtcd(ctx, etcds); err != nil {
		return r, err
	}
	for _, role := range []string{spec.RoleEtcdMain, spec.RoleEtcdEvents} {
		if err := r.WaitEtcdHealthy(ctx, role); err != nil {
			return r, err
		}
	}
	r.logf("etcd healthy (%s)", time.Since(began).Round(time.Second))
	if err := r.startLB(); err != nil {
		return r, err
	}
	apiservers := p.Of(spec.RoleAPIServer)
	r.logf("booting %d apiserver machines (kube-apiserver, controller-manager, scheduler, CSR approver)", len(apiservers))
	if err := r.bootAll(ctx, apiservers); err != nil {
		return r, err
	}
	if err := r.WaitAPIHealthy(ctx); err != nil {
		return r, err
	}
	r.logf("control plane healthy behind the load balancer (%s)", time.Since(began).Round(time.Second))
	if err := r.ApplyFoundation(ctx); err != nil {
		return r, err
	}
	if err := r.startNodes(ctx); err != nil {
		return r, err
	}
	if err := r.recordApplied(); err != nil {
		return r, err
	}
	r.logf("up in %s", time.Since(began).Round(time.Second))
	return r, nil
}

// bootEtcd boots the etcd members, and gives up early, saying why, when a majority of the main
// members refuse to start a new cluster over lost data (their etcd-join reports restore-needed):
// without them there is no quorum to wait for.
func (r *Rehearsal) bootEtcd(ctx context.Context, etcds []machines.Instance) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var refusal atomic.Value
	go func() {
		for ctx.Err() == nil {
			if why, ok := r.restoreNeeded(); ok {
				refusal.Store(why)
				cancel()
				return
			}
			time.Sleep(time.Second)
		}
	}()
	err := r.bootAll(ctx, etcds)
	if why, ok := refusal.Load().(string); ok {
		return fmt.Errorf("%s. Here: `make etcd-restore STACK=<env> [SNAPSHOT=<name>]`, then `make rehearse` again (or start over, deleting the backups: `make rehearse-clean`)", why)
	}
	return err
}

// restoreNeeded reports whether a majority of the main etcd members refuse to bootstrap, with the
// first one's reason.
func (r *Rehearsal) restoreNeeded() (string, bool) {
	var why string
	members, refusing := r.Of(spec.RoleEtcdMain), 0
	for _, in := range members {
		status, err := os.ReadFile(filepath.Join(r.Root(in.Name), machine.EtcdStatusFile))
		if err == nil && strings.HasPrefix(string(status), etcdbackup.RestoreNeeded) {
			refusing++
			if why == "" {
				why = in.Name + ": " + strings.TrimSpace(string(status))
			}
		}
	}
	return fmt.Sprintf("%d of %d %s members refuse to start: %s", refusing, len(members), spec.RoleEtcdMain, why), refusing > len(members)/2
}

// UpEtcd starts only the members of one etcd cluster of the plan, for drills that need an etcd
// of their own.
func UpEtcd(ctx context.Context, p *Layout, role string, progress io.Writer) (r *Rehearsal, err error) {
	if err := StopDir(p.Dir, progress); err != nil {
		return nil, err
	}
	r = &Rehearsal{Layout: p, progress: progress}
	if err = r.prepare(); err == nil && role == spec.RoleEtcdMain {
		err = r.StartStore(ctx)
	}
	if err == nil {
		if err = r.bootAll(ctx, p.Of(role)); err == nil {
			err = r.WaitEtcdHealthy(ctx, role)
		}
	}
	if err != nil {
		_ = r.Down()
		return nil, err
	}
	return r, nil
}

func (r *Rehearsal) logf(format string, args ...any) {
	r.mu.Lock()
	progress := r.progress
	r.mu.Unlock()
	if progress != nil {
		fmt.Fprintf(progress, "==> "+format+"\n", args...)
	}
}

// SetProgress sends the rehearsal's progress lines to w from now on.
func (r *Rehearsal) SetProgress(w io.Writer) {
	r.mu.Lock()
	r.progress = w
	r.mu.Unlock()
}

// prepare writes the client PKI, the kubeconfig, the deviations and every machine's files.
func (r *Rehearsal) prepare() error {
	p := r.Layout
	if err := p.writeClientPKI(); err != nil {
		return err
	}
	if err := p.WriteDeviations(false); err != nil {
		return err
	}
	if p.fresh { // a new cluster: nothing of an earlier one without its PKI may seed it
		for _, dir := range []string{p.MachinesDir(), p.StoreDir()} {
			if err := os.RemoveAll(dir); err != nil {
				return err
			}
		}
	}
	if err := p.saveIdentity(); err != nil {
		return err
	}
	p.fresh = false // from now on this directory holds this cluster
	logs := p.LogDir()
	if err := os.RemoveAll(logs); err != nil {
		return err
	}
	if err := os.MkdirAll(logs, 0o755); err != nil {
		return err
	}
	for _, in := range p.Instances {
		if err := p.materialize(in); err != nil {
			return fmt.Errorf("rehearsal: write machine %s: %w", in.Name, err)
		}
	}
	return nil
}

func (r *Rehearsal) bootAll(ctx context.Context, ins []machines.Instance) error {
	errs := make([]error, len(ins))
	var wg sync.WaitGroup
	for i, in := range ins {
		wg.Add(1)
		go func() { defer wg.Done(); errs[i] = r.Boot(ctx, in.Name) }()
	}
	wg.Wait()
	return errors.Join(errs...)
}

// Boot runs a machine's units in order, as systemd does at boot: oneshots to completion (retried
// every RestartSec while they fail), services started unless already running.
func (r *Rehearsal) Boot(ctx context.Context, name string) error {
	in, err := r.Instance(name)
	if err != nil {
		return err
	}
	for _, u := range in.Machine.Units {
		if u.Name == machine.EtcdDiskUnit && r.EtcdFsyncLatency > 0 {
			if err := r.mountEtcdDisk(ctx, in); err != nil {
				return fmt.Errorf("%s: %s: %w", name, u.Name, err)
			}
			continue
		}
		if _, skip := skippedUnits[u.Name]; skip {
			continue
		}
		uc, err := parseUnit(u)
		if err != nil {
			return err
		}
		if p := r.Proc(name, uc.Name); p != nil && p.Alive() {
			continue
		}
		if uc.Oneshot {
			if err := r.runOneshot(ctx, in, uc); err != nil {
				return fmt.Errorf("%s: %s: %w (log: %s)", name, u.Name, err, r.Log(name, uc.Name))
			}
			continue
		}
		if err := r.startService(in, uc); err != nil {
			return fmt.Errorf("%s: %s: %w", name, u.Name, err)
		}
	}
	return nil
}

// startService starts a long-running unit and restarts it after RestartSec when it ends (always)
// or fails (on-failure), as systemd does, until it is stopped on purpose or the rehearsal ends.
func (r *Rehearsal) startService(in machines.Instance, uc unitCommand) error {
	proc, err := r.startUnit(in, uc)
	if err != nil {
		return err
	}
	proc.Role, proc.Machine, proc.Name = in.Role, in.Name, uc.Name
	r.describe(proc, in)
	if err := r.track(proc); err != nil {
		return err
	}
	go func() {
		<-proc.Exited()
		if uc.Restart != "always" && (uc.Restart != "on-failure" || !proc.Failed()) {
			return
		}
		time.Sleep(uc.RestartSec)
		if proc.Stopping() || r.closing.Load() || r.Proc(in.Name, uc.Name) != proc {
			return
		}
		if err := r.startService(in, uc); err != nil {
			r.logf("%s: restart %s: %v", in.Name, uc.Name, err)
		}
	}()
	return nil
}

// startUnit starts a unit's command on its machine, logging to the unit's log.
func (r *Rehearsal) startUnit(in machines.Instance, uc unitCommand) (*machines.Proc, error) {
	argv, env, err := r.unitArgv(in, uc)
	if err != nil {
		return nil, err
	}
	cores, limited := r.CPULimits[in.Role]
	if !limited {
		return machines.StartProcess(argv, env, r.Root(in.Name), r.Log(in.Name, uc.Name))
	}
	dirs, err := machines.MakeCgroups(r.cgroup(), in.Role)
	if err != nil {
		return nil, err
	}
	if err := machines.LimitCPU(dirs, cores); err != nil {
		return nil, err
	}
	// A Go runtime before 1.25 runs a thread per host core whatever its quota: bursts on both cores
	// spend a period's quota early and wait out the rest throttled, which no VM of that size does.
	// The toolchain builds with a later Go, which reads the quota itself; this states it for any
	// binary that does not.
	env = append(env, fmt.Sprintf("GOMAXPROCS=%d", int(math.Ceil(cores))))
	p, err := machines.StartProcess(machines.InCgroups(dirs, argv), env, r.Root(in.Name), r.Log(in.Name, uc.Name))
	if err == nil {
		p.Command = argv // what it runs once the shell has moved it
	}
	return p, err
}

// cgroup is the rehearsal's cgroup in every hierarchy, under this process's: a role's limit
// (CPULimits) holds in <cgroup>/<role>.
func (r *Rehearsal) cgroup() string { return fmt.Sprintf("cfrehearse-%d", r.Base) }

// describe fills in how a client reaches the process.
func (r *Rehearsal) describe(p *machines.Proc, in machines.Instance) {
	adminCert, adminKey := r.PKIFile(pki.Admin, "crt"), r.PKIFile(pki.Admin, "key")
	switch p.Name {
	case "etcd":
		p.URL = machines.EtcdClientURL(in)
		p.CA, p.Cert, p.Key = r.PKIFile(pki.EtcdServersCA, "crt"), r.PKIFile(pki.APIServerEtcdClient, "crt"), r.PKIFile(pki.APIServerEtcdClient, "key")
	case APIServerProcess:
		p.URL = fmt.Sprintf("https://%s:%d", in.IP, wellknown.APIServerPort)
		p.CA, p.Cert, p.Key = r.PKIFile(pki.ClusterCA, "crt"), adminCert, adminKey
	case "kube-controller-manager", "kube-scheduler":
		port := wellknown.ControllerManagerPort
		if p.Name == "kube-scheduler" {
			port = wellknown.SchedulerPort
		}
		// Serving certificates are self-signed at start: no CA to give.
		p.URL = fmt.Sprintf("https://%s:%d", in.IP, port)
		p.Cert, p.Key = adminCert, adminKey
	}
}

// runOneshot runs a oneshot unit to completion, retrying every RestartSec while it fails.
func (r *Rehearsal) runOneshot(ctx context.Context, in machines.Instance, uc unitCommand) error {
	for {
		proc, err := r.startUnit(in, uc)
		if err != nil {
			return err
		}
		select {
		case <-ctx.Done():
			_ = proc.Stop(syscall.SIGTERM, time.Second)
			return ctx.Err()
		case <-proc.Exited():
		}
		if proc.Err() == nil || uc.Restart == "" {
			return proc.Err()
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%w; last attempt: %v", ctx.Err(), proc.Err())
		case <-time.After(uc.RestartSec):
		}
	}
}

// track records a started process, replacing an earlier one of the same machine and name.
func (r *Rehearsal) track(p *machines.Proc) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	for i, old := range r.procs {
		if old.Machine == p.Machine && old.Name == p.Name {
			r.procs[i] = p
			return machines.WriteEndpoints(r.EndpointsFile(), r.procs)
		}
	}
	r.procs = append(r.procs, p)
	return machines.WriteEndpoints(r.EndpointsFile(), r.procs)
}

// Proc returns the latest process of a machine's unit, or nil.
func (r *Rehearsal) Proc(machineName, name string) *machines.Proc {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, p := range r.procs {
		if p.Machine == machineName && p.Name == name {
			return p
		}
	}
	return nil
}

// Procs returns every process started, running or not.
func (r *Rehearsal) Procs() []*machines.Proc {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]*machines.Proc(nil), r.procs...)
}

// Stop stops one unit of a machine: SIGKILL for a crash, SIGTERM for a clean stop.
func (r *Rehearsal) Stop(machineName, name string, sig syscall.Signal) error {
	p := r.Proc(machineName, name)
	if p == nil {
		return fmt.Errorf("rehearsal: %s runs no %s", machineName, name)
	}
	return p.Stop(sig, 10*time.Second)
}

// StopMachine stops every unit of a machine, last started first: SIGKILL when hard (a crash),
// SIGTERM otherwise (a clean shutdown).
func (r *Rehearsal) StopMachine(_ context.Context, machineName string, hard bool) error {
	sig := syscall.SIGTERM
	if hard {
		sig = syscall.SIGKILL
	}
	procs := r.Procs()
	var errs []error
	for i := len(procs) - 1; i >= 0; i-- {
		if procs[i].Machine == machineName {
			errs = append(errs, procs[i].Stop(sig, 10*time.Second))
		}
	}
	return errors.Join(errs...)
}

// Down stops everything this rehearsal started and forgets it.
func (r *Rehearsal) Down() error {
	r.closing.Store(true)
	isDisk := func(p *machines.Proc) bool { return p.Name == etcdDiskProcess }
	// The disks last, once nothing has their files open, so that each unmounts cleanly.
	errs := []error{machines.StopAll(slices.DeleteFunc(r.Procs(), isDisk))}
	errs = append(errs, machines.StopAll(slices.DeleteFunc(r.Procs(), func(p *machines.Proc) bool { return !isDisk(p) })))
	return errors.Join(append(errs, machines.DetachMounts(r.Dir), machines.RemoveCgroups(r.cgroup()), os.Remove(r.EndpointsFile()))...)
}
