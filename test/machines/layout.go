package machines

import (
	"context"
	"fmt"
	"net"
	"path/filepath"

	"github.com/clusterforge/clusterforge/components/machine"
	"github.com/clusterforge/clusterforge/components/pki"
	"github.com/clusterforge/clusterforge/components/spec"
)

// Options shape a rehearsal.
type Options struct {
	// Dir is the rehearsal's directory, build/rehearse/<env>.
	Dir string
	// Tools is the directory holding the pinned binaries (.tools/bin).
	Tools string
	// Base is the second octet of every loopback address, so rehearsals can run side by side. Default 0.
	Base int
	// NodesPerPool caps the KWOK nodes simulated per pool. Default 3.
	NodesPerPool int
	// Self is the command that runs this package's load balancer: Self + ["lb", flags...].
	Self []string
	// Dial opens this process's connections to the machines. Default: the host's network.
	Dial func(ctx context.Context, network, addr string) (net.Conn, error)
	// StoreHost is the address the backup store listens on. Default 127.0.0.1.
	StoreHost string
	// EventsInMainEtcd starts the apiservers without the events override: Events in the main etcd,
	// as a cluster without the split (L03) keeps them. Only the scale benchmark's A/B storm sets it.
	EventsInMainEtcd bool
}

// Instance is one rehearsed machine.
type Instance struct {
	// Name is the machine name Azure would give it.
	Name string
	Role string
	// IP is its loopback address.
	IP      string
	Machine machine.Machine
	// Versions are the binaries it runs: a roll changes them machine by machine.
	Versions spec.Versions
}

// Layout is everything a rehearsal starts, rendered from the stack with the deviations applied.
type Layout struct {
	Options
	// Cluster is the stack's cluster with the loopback network.
	Cluster *spec.Cluster
	// Stack is the stack's cluster as its file says, what `make roll` compares with.
	Stack     *spec.Cluster
	Bundle    pki.Bundle
	Instances []Instance
	// fresh is set when the PKI was issued now rather than kept from an earlier rehearsal: what
	// that one left (etcd data, backups) belongs to another cluster.
	Fresh bool
}

// NewLayout renders the control-plane machines of a validated cluster for the rehearsal.
func NewLayout(c *spec.Cluster, o Options) (*Layout, error) {
	if o.NodesPerPool == 0 {
		o.NodesPerPool = 3
	}
	mapped, err := loopbackNetwork(c, o.Base)
	if err != nil {
		return nil, err
	}
	p := &Layout{Options: o, Cluster: mapped, Stack: c}
	apiserverIPs := p.APIServerIPs()
	bundle, kept, err := p.loadIdentity()
	if err == nil && !kept {
		p.Fresh = true
		bundle, err = pki.Issue(pki.Authorities(mapped), RehearsalProfiles(mapped, apiserverIPs))
	}
	if err != nil {
		return nil, err
	}
	p.Bundle = bundle
	return p, p.Render()
}

// Render builds every control-plane instance from the layout's cluster and bundle.
func (p *Layout) Render() error {
	mapped, apiserverIPs := p.Cluster, p.APIServerIPs()
	p.Instances = nil
	for _, e := range mapped.EtcdClusters() {
		m, err := machine.Render(mapped, p.Bundle, e.Role)
		if err != nil {
			return err
		}
		for _, member := range e.Members {
			p.Instances = append(p.Instances, Instance{Name: member.Name, Role: e.Role, IP: member.IP, Machine: m, Versions: mapped.Versions})
		}
	}
	m, err := machine.Render(mapped, p.Bundle, spec.RoleAPIServer)
	if err != nil {
		return err
	}
	for i, ip := range apiserverIPs {
		p.Instances = append(p.Instances, Instance{Name: fmt.Sprintf("%s-%s-%d", mapped.Name, spec.RoleAPIServer, i), Role: spec.RoleAPIServer, IP: ip, Machine: m, Versions: mapped.Versions})
	}
	return nil
}

func (p *Layout) APIServerIPs() []string {
	var ips []string
	for i := range p.Cluster.APIServer.Count {
		ips = append(ips, apiserverMachineIP(p.Base, i))
	}
	return ips
}

// Of returns the instances of one role, in order.
func (p *Layout) Of(role string) []Instance {
	var out []Instance
	for _, in := range p.Instances {
		if in.Role == role {
			out = append(out, in)
		}
	}
	return out
}

// Instance returns the named instance.
func (p *Layout) Instance(name string) (Instance, error) {
	for _, in := range p.Instances {
		if in.Name == name {
			return in, nil
		}
	}
	return Instance{}, fmt.Errorf("rehearsal: no machine %q", name)
}

// Paths inside the rehearsal directory.

// Root is the directory that stands for a machine's /.
func (p *Layout) Root(machineName string) string {
	return filepath.Join(p.Dir, "machines", machineName)
}

// Log is where one unit of a machine logs.
func (p *Layout) Log(machineName, unit string) string {
	return filepath.Join(p.Dir, "logs", machineName+"."+unit+".log")
}

// Kubeconfig is the admin kubeconfig that reaches the API through the load balancer.
func (p *Layout) Kubeconfig() string { return filepath.Join(p.Dir, "kubeconfig") }

// EndpointsFile lists every running process.
func (p *Layout) EndpointsFile() string { return filepath.Join(p.Dir, "endpoints.json") }

// LBStateFile is where the load balancer records which backends are in rotation.
func (p *Layout) LBStateFile() string { return filepath.Join(p.Dir, "lb.json") }

// PKIFile is a certificate or key of the rehearsal's PKI, for clients outside the machines.
func (p *Layout) PKIFile(name, ext string) string { return filepath.Join(p.Dir, "pki", name+"."+ext) }
