package rehearsal

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/clusterforge/clusterforge/components/machine"
	"github.com/clusterforge/clusterforge/components/pki"
	"github.com/clusterforge/clusterforge/components/roll"
	"github.com/clusterforge/clusterforge/components/spec"
	"github.com/clusterforge/clusterforge/test/standin/lb"
)

// Fleet is a running cluster as drills see it: machines to stop, wipe and start, and the clients
// that watch what that does. The process rehearsal (Rehearsal) and booted machines (Booted) are
// both fleets, so each drill is written once (package drills).
type Fleet interface {
	// Of lists the machines of a role.
	Of(role string) []Instance
	// StopMachine stops a machine, crashing it when hard; its disks stay.
	StopMachine(ctx context.Context, name string, hard bool) error
	// StartMachine boots a stopped machine from its disks.
	StartMachine(ctx context.Context, name string) error
	// WipeLocalDisk empties a stopped machine's local temp/NVMe disk, as Azure's deallocation does.
	WipeLocalDisk(name string) error
	// UnitLog is what a unit of a machine logged since the machine last booted.
	UnitLog(ctx context.Context, machine, unit string) (string, error)
	// LeaseMachine names the machine whose component holds a kube-system lease.
	LeaseMachine(ctx context.Context, lease string) (string, error)

	EtcdClient(role string, members ...string) (*clientv3.Client, error)
	Clientset() (*kubernetes.Clientset, error)
	Get(ctx context.Context, url string) (int, string, error)
	WaitEtcdHealthy(ctx context.Context, role string) error
	WaitAPIHealthy(ctx context.Context) error
	// LBBackendHealthy reports whether the load balancer has backend (host:port) in rotation.
	LBBackendHealthy(backend string) (bool, error)
}

var (
	_ Fleet = (*Rehearsal)(nil)
	_ Fleet = (*Booted)(nil)
)

// RESTConfig is the admin's client configuration, through the load balancer.
func (p *Layout) RESTConfig() (*rest.Config, error) {
	cfg, err := clientcmd.BuildConfigFromFlags("", p.Kubeconfig())
	if err != nil {
		return nil, err
	}
	cfg.QPS, cfg.Burst, cfg.Dial = 100, 200, p.Dial
	return cfg, nil
}

// RESTConfigAs is a client configuration through the load balancer for an identity of its own:
// user, in group when group is not empty, by a client certificate the cluster CA issues now.
func (p *Layout) RESTConfigAs(user, group string) (*rest.Config, error) {
	kubeconfig, err := p.kubeconfigAs(user, group)
	if err != nil {
		return nil, err
	}
	cfg, err := clientcmd.RESTConfigFromKubeConfig([]byte(kubeconfig))
	if err != nil {
		return nil, err
	}
	cfg.Dial = p.Dial
	return cfg, nil
}

// writeKubeconfigAs writes a kubeconfig of RESTConfigAs's identity, for a process.
func (p *Layout) writeKubeconfigAs(path, user, group string) error {
	kubeconfig, err := p.kubeconfigAs(user, group)
	if err != nil {
		return err
	}
	return writeFile(path, kubeconfig, 0o600)
}

func (p *Layout) kubeconfigAs(user, group string) (string, error) {
	profile := pki.ClientOf("client", user, group)
	b, err := pki.Renew(p.Bundle, pki.Authorities(p.Cluster), []pki.Profile{profile})
	if err != nil {
		return "", err
	}
	kp := b.Pair(profile.Name)
	return machine.EmbeddedKubeconfig(p.Cluster.Name, p.Cluster.APIServerURL(), p.Bundle.Pair(pki.ClusterCA).CertPEM, kp.CertPEM, kp.KeyPEM), nil
}

// Clientset is a Kubernetes client of the admin, through the load balancer.
func (p *Layout) Clientset() (*kubernetes.Clientset, error) {
	cfg, err := p.RESTConfig()
	if err != nil {
		return nil, err
	}
	return kubernetes.NewForConfig(cfg)
}

// LBBackendHealthy reads the load balancer's state file.
func (p *Layout) LBBackendHealthy(backend string) (bool, error) {
	state, err := lb.ReadState(p.LBStateFile())
	if err != nil {
		return false, err
	}
	for _, b := range state {
		if b.Address == backend {
			return b.Healthy, nil
		}
	}
	return false, fmt.Errorf("load balancer has no backend %s", backend)
}

// StartMachine runs the machine's units again, as a boot does.
func (r *Rehearsal) StartMachine(ctx context.Context, name string) error { return r.Boot(ctx, name) }

// WipeLocalDisk deletes the machine's etcd data dir, all its local disk holds here (deviation "local disk").
func (r *Rehearsal) WipeLocalDisk(name string) error {
	return os.RemoveAll(filepath.Join(r.Root(name), machine.EtcdDataDir))
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
		if strings.Contains(last, "successfully acquired lease kube-system/"+component) {
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

// StopMachine stops a booted machine.
func (b *Booted) StopMachine(_ context.Context, name string, hard bool) error {
	return b.Stop(name, hard)
}

// StartMachine boots a stopped machine and waits until systemd has finished starting its units.
func (b *Booted) StartMachine(ctx context.Context, name string) error {
	if err := b.Start(ctx, name); err != nil {
		return err
	}
	return poll(ctx, 3*time.Minute, name+" boot", func(ctx context.Context) error {
		out, _ := b.Exec(ctx, name, "systemctl", "is-system-running")
		switch state := strings.TrimSpace(out); state {
		case "running", "degraded":
			return nil
		default:
			return fmt.Errorf("systemd is %q", state)
		}
	})
}

// UnitLog is the unit's journal since the machine booted.
func (b *Booted) UnitLog(ctx context.Context, name, unit string) (string, error) {
	return b.Exec(ctx, name, "journalctl", "--boot", "--unit", unit, "--no-pager", "--output=cat")
}

// LeaseMachine reads the lease's holder, "<host name>_<id>": booted machines have their own names.
func (b *Booted) LeaseMachine(ctx context.Context, lease string) (string, error) {
	cs, err := b.Clientset()
	if err != nil {
		return "", err
	}
	host, err := roll.LeaseHolderHost(ctx, cs, lease)
	if err != nil {
		return "", err
	}
	if _, err := b.Machine(host); err != nil {
		return "", fmt.Errorf("lease %s is held by %q, no machine of this boot", lease, host)
	}
	return host, nil
}
