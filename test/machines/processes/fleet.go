package processes

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/clusterforge/clusterforge/components/machine"
	"github.com/clusterforge/clusterforge/components/spec"
	"github.com/clusterforge/clusterforge/test/machines"
)

// StartMachine runs the machine's units again, as a boot does.
func (r *Rehearsal) StartMachine(ctx context.Context, name string) error { return r.Boot(ctx, name) }

// WipeLocalDisk deletes the machine's etcd data dir, all its local disk holds here (deviation "local disk").
func (r *Rehearsal) WipeLocalDisk(name string) error {
	dir := filepath.Join(r.Root(name), machine.EtcdDataDir)
	if !machines.Mounted(dir) {
		return os.RemoveAll(dir)
	}
	// A disk stand-in stays mounted; what is on it goes.
	entries, err := os.ReadDir(dir)
	if err != nil {
		return err
	}
	for _, e := range entries {
		if err := os.RemoveAll(filepath.Join(dir, e.Name())); err != nil {
			return err
		}
	}
	return nil
}

// UnitLog reads the unit's log file, from its last start on.
func (r *Rehearsal) UnitLog(_ context.Context, machineName, unit string) (string, error) {
	data, err := os.ReadFile(r.Log(machineName, strings.TrimSuffix(unit, ".service")))
	return string(data), err
}

// LeaseMachine finds the apiserver machine whose component holds its lease: every machine here
// shares this host's name, so the holder identity cannot tell; the component's log can.
func (r *Rehearsal) LeaseMachine(_ context.Context, component string) (string, error) {
	var leader string
	var newest time.Time
	for _, in := range r.Of(spec.RoleAPIServer) {
		p := r.Proc(in.Name, component)
		if p == nil || !p.Alive() {
			continue
		}
		log, _ := os.ReadFile(p.Log)
		last := string(log)
		if i := strings.LastIndex(last, "---- "); i >= 0 {
			last = last[i:]
		}
		if acquiredLease(last, component) {
			info, _ := os.Stat(p.Log)
			if leader == "" || info.ModTime().After(newest) {
				leader, newest = in.Name, info.ModTime()
			}
		}
	}
	if leader == "" {
		return "", fmt.Errorf("no running %s holds its lease", component)
	}
	return leader, nil
}

// acquiredLease reports whether a component's log says it took its lease, in either form client-go
// has logged it: "successfully acquired lease kube-system/<name>", and structured, as the pinned
// release does: `"Successfully acquired lease" lock="kube-system/<name>"`.
func acquiredLease(log, component string) bool {
	for _, line := range strings.Split(log, "\n") {
		if strings.Contains(strings.ToLower(line), "successfully acquired lease") &&
			(strings.Contains(line, " kube-system/"+component) || strings.Contains(line, `"kube-system/`+component+`"`)) {
			return true
		}
	}
	return false
}

// WaitAPIHealthy waits until every apiserver is ready, the load balancer serves the API, and
// every controller-manager and scheduler answers its health check (on the machine's own
// address, where the rehearsal moves their 127.0.0.1).
func (r *Rehearsal) WaitAPIHealthy(ctx context.Context) error {
	return r.WaitAPIHealthyWith(ctx, func(ctx context.Context, in machines.Instance, port int) error {
		// Their serving certificates are self-signed, so only the answer is checked.
		return r.InsecureOK(ctx, fmt.Sprintf("https://%s:%d/healthz", in.IP, port))
	})
}
