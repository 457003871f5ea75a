package processes

import (
	"fmt"
	"path/filepath"

	"github.com/clusterforge/clusterforge/components/machine"
	"github.com/clusterforge/clusterforge/components/pki"
	"github.com/clusterforge/clusterforge/components/spec"
	"github.com/clusterforge/clusterforge/test/machines"
)

// NewLayout renders the control-plane machines of a validated cluster for the rehearsal.
// Layout is a stack's machines as this runtime starts them: on loopback addresses of their own,
// each machine's root a directory of the rehearsal's, rendered with the deviations applied.
type Layout struct {
	*machines.Layout
	// fresh is set when the PKI was issued now rather than kept from an earlier rehearsal: what
	// that one left (etcd data, backups) belongs to another cluster.
	fresh bool
}

func NewLayout(c *spec.Cluster, o machines.Options) (*Layout, error) {
	if o.NodesPerPool == 0 {
		o.NodesPerPool = 3
	}
	mapped, err := loopbackNetwork(c, o.Base)
	if err != nil {
		return nil, err
	}
	p := &Layout{Layout: &machines.Layout{Options: o, Cluster: mapped, Stack: c}}
	apiserverIPs := p.apiserverIPs()
	bundle, kept, err := p.loadIdentity()
	if err == nil && !kept {
		p.fresh = true
		bundle, err = pki.Issue(pki.Authorities(mapped), loopbackProfiles(mapped, apiserverIPs))
	}
	if err != nil {
		return nil, err
	}
	p.Bundle = bundle
	return p, p.renderInstances()
}

// renderInstances builds every control-plane instance from the layout's cluster and bundle.
func (p *Layout) renderInstances() error {
	mapped, apiserverIPs := p.Cluster, p.apiserverIPs()
	p.Instances = nil
	for _, e := range mapped.EtcdClusters() {
		m, err := machine.Render(mapped, p.Bundle, e.Role)
		if err != nil {
			return err
		}
		for _, member := range e.Members {
			p.Instances = append(p.Instances, machines.Instance{Name: member.Name, Role: e.Role, IP: member.IP, Machine: m, Versions: mapped.Versions})
		}
	}
	m, err := machine.Render(mapped, p.Bundle, spec.RoleAPIServer)
	if err != nil {
		return err
	}
	for i, ip := range apiserverIPs {
		p.Instances = append(p.Instances, machines.Instance{Name: fmt.Sprintf("%s-%s-%d", mapped.Name, spec.RoleAPIServer, i), Role: spec.RoleAPIServer, IP: ip, Machine: m, Versions: mapped.Versions})
	}
	return nil
}

func (p *Layout) apiserverIPs() []string {
	var ips []string
	for i := range p.Cluster.APIServer.Count {
		ips = append(ips, apiserverMachineIP(p.Base, i))
	}
	return ips
}

// Paths inside the rehearsal directory.

// Root is the directory that stands for a machine's /.
func (p *Layout) Root(machineName string) string {
	return filepath.Join(p.MachinesDir(), machineName)
}

// Log is where one unit of a machine logs.
func (p *Layout) Log(machineName, unit string) string {
	return filepath.Join(p.LogDir(), machineName+"."+unit+".log")
}

// PKIFile is a certificate or key of the rehearsal's PKI, for clients outside the machines.
func (p *Layout) PKIFile(name, ext string) string {
	return filepath.Join(p.Dir, "pki", name+"."+ext)
}
