package machines

import (
	"context"
	"crypto/x509"
	"fmt"
	"os"
	"path/filepath"

	"github.com/clusterforge/clusterforge/components/certexpiry"
	"github.com/clusterforge/clusterforge/components/change"
	"github.com/clusterforge/clusterforge/components/roll"
	"github.com/clusterforge/clusterforge/components/spec"
	"github.com/clusterforge/clusterforge/components/wellknown"
)

// AppliedFile is where a rehearsal records the spec it runs (spec.Resolved), as the Pulumi
// program records it in the appliedSpec stack output.
func (p *Layout) AppliedFile() string { return filepath.Join(p.Dir, "applied.yaml") }

// RollJournal is the journal of a roll of this rehearsal in progress.
func (p *Layout) RollJournal() string { return filepath.Join(p.Dir, "roll.json") }

// Applied reads the spec the rehearsal was last applied with.
func (p *Layout) Applied() (*spec.Cluster, error) {
	data, err := os.ReadFile(p.AppliedFile())
	if err != nil {
		return nil, err
	}
	return spec.ParseResolved(data)
}

func (p *Layout) RecordApplied() error {
	data, err := p.Stack.Resolved()
	if err != nil {
		return err
	}
	return WriteFile(p.AppliedFile(), string(data), 0o644)
}

// Inventory lists the control-plane machines and the nodes of every pool.
func (p *Layout) Inventory(ctx context.Context) (change.Inventory, error) {
	inv := change.Inventory{}
	for _, in := range p.Instances {
		inv[in.Role] = append(inv[in.Role], in.Name)
	}
	return roll.AddNodes(ctx, p, inv)
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

// Attach plans the rehearsal in dir as it was last applied, to read from it (`make diff`); it
// starts and writes nothing.
func Attach(dir, tools string) (*Layout, error) {
	p := &Layout{Options: Options{Dir: dir}}
	applied, err := p.Applied()
	if err != nil {
		return nil, fmt.Errorf("no rehearsal of this stack has been applied in %s: %w", dir, err)
	}
	attached, err := NewLayout(applied, Options{Dir: dir, Tools: tools, NodesPerPool: 3})
	if err != nil {
		return nil, err
	}
	if attached.Fresh {
		return nil, fmt.Errorf("%s has no identity of its own: rehearse it again", dir)
	}
	return attached, nil
}
