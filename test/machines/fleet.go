package machines

import (
	"context"
	"crypto/x509"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/clusterforge/clusterforge/components/certexpiry"
	"github.com/clusterforge/clusterforge/components/machine"
	"github.com/clusterforge/clusterforge/components/pki"
	"github.com/clusterforge/clusterforge/components/roll"
	"github.com/clusterforge/clusterforge/components/spec"
	"github.com/clusterforge/clusterforge/components/wellknown"
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

// APIServerVersion reads the machine's /version.
func (p *Layout) APIServerVersion(ctx context.Context, name string) (string, error) {
	in, err := p.Instance(name)
	if err != nil {
		return "", err
	}
	code, body, err := p.Get(ctx, fmt.Sprintf("https://%s:%d/version", in.IP, wellknown.APIServerPort))
	if err != nil {
		return "", err
	}
	return roll.GitVersion(name, code, []byte(body))
}

// InRotation reads the load balancer's view of the machine.
func (p *Layout) InRotation(_ context.Context, name string) (bool, error) {
	in, err := p.Instance(name)
	if err != nil {
		return false, err
	}
	return p.LBBackendHealthy(fmt.Sprintf("%s:%d", in.IP, wellknown.APIServerPort))
}

// ServingCertificate is the certificate a control-plane machine serves (etcd's client port, the
// apiserver's), read by a TLS handshake: what the machine runs, not what was rendered for it.
func (p *Layout) ServingCertificate(ctx context.Context, name string) (*x509.Certificate, error) {
	in, err := p.Instance(name)
	if err != nil {
		return nil, err
	}
	port := wellknown.EtcdClientPort
	if in.Role == spec.RoleAPIServer {
		port = wellknown.APIServerPort
	}
	return certexpiry.PeerCertificate(ctx, p.Dial, fmt.Sprintf("%s:%d", in.IP, port))
}

// LBCommand is the load balancer on the API address in front of every apiserver machine, probing
// as the Azure program configures it (Self + lb).
func (p *Layout) LBCommand() []string {
	var backends []string
	for _, in := range p.Of(spec.RoleAPIServer) {
		backends = append(backends, fmt.Sprintf("%s:%d", in.IP, wellknown.APIServerPort))
	}
	return append(slices.Clone(p.Self), "lb",
		"--listen="+fmt.Sprintf("%s:%d", p.Cluster.Network.APIServerIP, wellknown.APIServerPort),
		"--backends="+strings.Join(backends, ","),
		"--probe-path="+spec.APIServerProbePath,
		"--interval="+(spec.APIServerProbeIntervalSeconds*time.Second).String(),
		"--failures="+strconv.Itoa(spec.APIServerProbeFailures),
		"--state="+p.LBStateFile())
}
