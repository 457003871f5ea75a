package processes

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"

	"github.com/clusterforge/clusterforge/components/machine"
	"github.com/clusterforge/clusterforge/components/pki"
	"github.com/clusterforge/clusterforge/test/machines"
)

// StartStore starts Azurite on the store's data and creates the container, as the Pulumi program
// does before any etcd machine exists.
func (r *Rehearsal) StartStore(ctx context.Context) error {
	proc, err := machines.StartProcess(r.StoreCommand(), os.Environ(), r.Dir, filepath.Join(r.LogDir(), "azurite.log"))
	if err != nil {
		return fmt.Errorf("start Azurite: %w (run `make tools-rehearsal`)", err)
	}
	proc.Role, proc.Machine, proc.Name, proc.URL = "backup-store", "store", "azurite", "http://"+r.StoreAddress()
	if err := r.track(proc); err != nil {
		return err
	}
	return r.CreateBackupContainers(ctx)
}

// identityFile keeps what Pulumi state keeps on Azure: the PKI, the token and the Secrets key,
// with the rendered cluster they belong to. With it a rehearsal brought up again is the same
// cluster, so the store's history is its own.
type identityFile struct {
	Cluster string     `json:"cluster"` // sha256 of what the PKI certifies
	Bundle  pki.Bundle `json:"bundle"`
}

func (p *Layout) identityPath() string { return filepath.Join(p.Dir, "identity.json") }

// identityDigest digests what the cluster's PKI certifies: names and addresses. A roll changes
// versions and sizes, never these, so a rolled rehearsal keeps its identity.
func (p *Layout) identityDigest() (string, error) {
	data, err := json.Marshal(struct {
		A []pki.Authority
		P []pki.Profile
	}{pki.Authorities(p.Cluster), loopbackProfiles(p.Cluster, p.apiserverIPs())})
	if err != nil {
		return "", err
	}
	sum := sha256.Sum256(data)
	return hex.EncodeToString(sum[:]), nil
}

// loadIdentity returns the bundle of an earlier rehearsal that certified the same names and
// addresses, or false. One that certified others is a different cluster: it must be cleaned first.
func (p *Layout) loadIdentity() (pki.Bundle, bool, error) {
	data, err := os.ReadFile(p.identityPath())
	if errors.Is(err, os.ErrNotExist) {
		return pki.Bundle{}, false, nil
	}
	if err != nil {
		return pki.Bundle{}, false, err
	}
	var id identityFile
	if err := json.Unmarshal(data, &id); err != nil {
		return pki.Bundle{}, false, fmt.Errorf("%s: %w", p.identityPath(), err)
	}
	digest, err := p.identityDigest()
	if err != nil {
		return pki.Bundle{}, false, err
	}
	if id.Cluster != digest {
		return pki.Bundle{}, false, fmt.Errorf("%s belongs to a stack that certified other names or addresses: a new cluster here; run `make rehearse-clean STACK=<env>` (it deletes that rehearsal and its backups)", p.Dir)
	}
	if id.Bundle.JoinSeed == "" { // kept from before the pools' join tokens: the same cluster, a seed more
		id.Bundle.JoinSeed = pki.NewJoinSeed()
	}
	return id.Bundle, true, nil
}

func (p *Layout) saveIdentity() error {
	digest, err := p.identityDigest()
	if err != nil {
		return err
	}
	data, err := json.Marshal(identityFile{Cluster: digest, Bundle: p.Bundle})
	if err != nil {
		return err
	}
	return machines.WriteFile(p.identityPath(), string(data), 0o600)
}

// Clean stops a rehearsal and deletes everything it kept: machines, identity, backups.
func Clean(dir string, progress io.Writer) error {
	if err := StopDir(dir, progress); err != nil {
		return err
	}
	return os.RemoveAll(dir)
}

// writeClientPKI writes what clients outside the machines use: the authorities, the admin's
// kubeconfig and the etcd client pair.
func (p *Layout) writeClientPKI() error {
	if err := machines.WriteFile(p.PKIFile(pki.EtcdServersCA, "crt"), p.Bundle.Trust(pki.EtcdServerCAs(p.Cluster)...), 0o644); err != nil {
		return err
	}
	for _, name := range []string{pki.ClusterCA, pki.Admin, pki.APIServerEtcdClient} {
		kp := p.Bundle.Pair(name)
		if err := machines.WriteFile(p.PKIFile(name, "crt"), kp.CertPEM, 0o644); err != nil {
			return err
		}
		if err := machines.WriteFile(p.PKIFile(name, "key"), kp.KeyPEM, 0o600); err != nil {
			return err
		}
	}
	kubeconfig := machine.EmbeddedKubeconfig(p.Cluster.Name, p.Cluster.APIServerURL(), p.Bundle.Pair(pki.ClusterCA).CertPEM,
		p.Bundle.Pair(pki.Admin).CertPEM, p.Bundle.Pair(pki.Admin).KeyPEM)
	return machines.WriteFile(p.Kubeconfig(), kubeconfig, 0o600)
}
