package machines

import (
	"context"
	"fmt"

	clientv3 "go.etcd.io/etcd/client/v3"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/clusterforge/clusterforge/components/machine"
	"github.com/clusterforge/clusterforge/components/pki"
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

// WriteKubeconfigAs writes a kubeconfig of RESTConfigAs's identity, for a process.
func (p *Layout) WriteKubeconfigAs(path, user, group string) error {
	kubeconfig, err := p.kubeconfigAs(user, group)
	if err != nil {
		return err
	}
	return WriteFile(path, kubeconfig, 0o600)
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
