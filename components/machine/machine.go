// Package machine renders, from a validated cluster spec and its PKI bundle, everything a machine of
// each role runs: component flags and config files, systemd units and the cloud-init document.
// One file per concern (etcd.go, apiserver.go, kubelet.go...), as in kops' nodeup builders. The
// Azure program, the Packer plugin and the rehearsal all consume this package; none builds flags
// of its own. Nothing here imports Pulumi.
package machine

import (
	"fmt"

	"github.com/clusterforge/clusterforge/components/pki"
	"github.com/clusterforge/clusterforge/components/spec"
)

// Paths on every machine.
const (
	BinDir       = "/usr/local/bin"
	LibexecDir   = "/usr/local/lib/clusterforge"
	PKIDir       = "/etc/kubernetes/pki"
	KubeDir      = "/etc/kubernetes"
	UnitDir      = "/etc/systemd/system"
	EtcdDataDir  = "/var/lib/etcd"
	AuditLogPath = AuditLogDir + "/audit.log"
	// NodeEnvFile holds the machine's own identity (NODE_NAME, NODE_IP), written at boot by
	// clusterforge-identity.service from Azure's instance metadata. Units read it, so machines of
	// one role share one user-data.
	NodeEnvFile = RunDir + "/node.env"
	RunDir      = "/run/clusterforge"
	AuditLogDir = "/var/log/kubernetes/audit"
)

// Roots are the directories that hold everything a machine's files, units and processes touch.
// The rehearsal places each under a per-machine root; a test keeps the list complete.
var Roots = []string{KubeDir, BinDir, LibexecDir, RunDir, EtcdDataDir, AuditLogDir, KubeletDir, UnitDir}

// Modes the CIS benchmark asks for: units are the control plane's "pod specifications" (1.1.1-1.1.8),
// and certificates are kept as private as keys (1.1.20).
const (
	unitMode = 0o600
	certMode = 0o600
)

// File is one file a machine receives.
type File struct {
	Path    string
	Content string
	// Mode is the octal permission, e.g. 0o600 for private keys.
	Mode int
}

// Unit is one systemd unit. Enable lists it for `systemctl enable --now` at first boot.
type Unit struct {
	Name    string
	Content string
	Enable  bool
}

// Machine is everything one role's machines boot with.
type Machine struct {
	Role  string
	Files []File
	Units []Unit
	// DisableEphemeralMount stops cloud-init mounting the resource disk at /mnt: the machine
	// formats and mounts it itself.
	DisableEphemeralMount bool
}

// UnitFiles returns the units as files under UnitDir, in order.
func (m Machine) UnitFiles() []File {
	files := make([]File, len(m.Units))
	for i, u := range m.Units {
		files[i] = File{Path: UnitDir + "/" + u.Name, Content: u.Content, Mode: unitMode}
	}
	return files
}

// Render builds the machine of one role.
func Render(c *spec.Cluster, b pki.Bundle, role string) (Machine, error) {
	m := Machine{Role: role}
	m.add(imageCheck(c, ImageOf(role)))
	m.add(identity())
	switch {
	case role == spec.RoleEtcdMain || role == spec.RoleEtcdEvents:
		for _, e := range c.EtcdClusters() {
			if e.Role == role {
				m.add(etcd(c, e, b))
				m.DisableEphemeralMount = true
			}
		}
	case role == spec.RoleAPIServer:
		m.add(apiserver(c, b))
		m.add(controllerManager(c, b))
		m.add(scheduler(c, b))
		m.add(csrApprover(c, b))
	default:
		pool, ok := c.PoolOfRole(role)
		if !ok {
			return Machine{}, fmt.Errorf("machine: no role %q; roles are %v", role, c.Roles())
		}
		if err := checkLabelsSplit(pool); err != nil {
			return Machine{}, err
		}
		if b.JoinSeed == "" {
			return Machine{}, fmt.Errorf("machine: role %s joins with its pool's token, and the bundle has no join seed", role)
		}
		m.add(kubelet(c, b, pool))
		m.add(kubeProxy())
		m.add(networkPolicy())
		m.DisableEphemeralMount = true // containerd-disk.service (baked in the image) takes the local disk
	}
	return m, nil
}

// RenderAll builds every role's machine, in spec.Roles order.
func RenderAll(c *spec.Cluster, b pki.Bundle) ([]Machine, error) {
	var out []Machine
	for _, role := range c.Roles() {
		m, err := Render(c, b, role)
		if err != nil {
			return nil, err
		}
		out = append(out, m)
	}
	return out, nil
}

// part is one concern's contribution to a machine.
type part struct {
	files []File
	units []Unit
}

func (m *Machine) add(p part) {
	m.Files = append(m.Files, p.files...)
	m.Units = append(m.Units, p.units...)
}

// pairFiles places a certificate and its key at PKIDir/<dir>/<name>.{crt,key}.
func pairFiles(dir, name string, kp pki.KeyPair) []File {
	return []File{
		{Path: CertPath(dir, name), Content: kp.CertPEM, Mode: certMode},
		{Path: KeyPath(dir, name), Content: kp.KeyPEM, Mode: 0o600},
	}
}

// CertPath and KeyPath are where a named certificate and key live.
func CertPath(dir, name string) string { return pkiPath(dir, name) + ".crt" }
func KeyPath(dir, name string) string  { return pkiPath(dir, name) + ".key" }

func pkiPath(dir, name string) string {
	if dir == "" {
		return PKIDir + "/" + name
	}
	return PKIDir + "/" + dir + "/" + name
}
