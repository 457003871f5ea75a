package machines

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/storage/azblob/bloberror"
	"github.com/Azure/azure-sdk-for-go/sdk/storage/azblob/container"

	"github.com/clusterforge/clusterforge/components/etcdbackup"
	"github.com/clusterforge/clusterforge/components/machine"
	"github.com/clusterforge/clusterforge/components/pki"
	"github.com/clusterforge/clusterforge/components/spec"
)

// Azurite's well-known development account (deviation "backup store"); not a secret.
const (
	devAccount    = "devstoreaccount1"
	devAccountKey = "Eby8vdM02xNOcqFlqUwJPLlmEtlCDXJ1OUzFT50uSRZ6IFsuFq2UVErCz4I6tq/K1SZFPTOtr/KBHBeksoGMGw=="
	StorePortBase = 10000
)

// StoreDir holds the blob store's data. Like Azure Blob it outlives the machines: Down keeps it,
// Clean removes it.
func (p *Layout) StoreDir() string { return filepath.Join(p.Dir, "store") }

// StoreAddress is where Azurite listens: StoreHost (127.0.0.1 by default), one port per loopback base.
func (p *Layout) StoreAddress() string {
	host := p.StoreHost
	if host == "" {
		host = "127.0.0.1"
	}
	return net.JoinHostPort(host, strconv.Itoa(StorePortBase+p.Base))
}

// StoreConnectionString reaches the rehearsal's Azurite with the development account.
func (p *Layout) StoreConnectionString() string {
	return "DefaultEndpointsProtocol=http;AccountName=" + devAccount + ";AccountKey=" + devAccountKey +
		";BlobEndpoint=http://" + p.StoreAddress() + "/" + devAccount + ";"
}

// BackupStore opens the main etcd's folder of the rehearsal's store, as the agent does.
func (p *Layout) BackupStore() (*etcdbackup.Store, error) {
	c, err := container.NewClientFromConnectionString(p.StoreConnectionString(), spec.BackupContainer, nil)
	if err != nil {
		return nil, err
	}
	return etcdbackup.NewStore(c, machine.EtcdBackupFor(p.Cluster, p.Cluster.EtcdClusters()[0]).Cluster), nil
}

// CreateContainer creates the backups' container once the store answers, as the Pulumi program
// does before any etcd machine exists.
func (p *Layout) CreateContainer(ctx context.Context) error {
	var opts *container.ClientOptions
	if p.Dial != nil {
		opts = &container.ClientOptions{}
		opts.Transport = &http.Client{Transport: &http.Transport{DialContext: p.Dial}}
	}
	c, err := container.NewClientFromConnectionString(p.StoreConnectionString(), spec.BackupContainer, opts)
	if err != nil {
		return err
	}
	return Poll(ctx, time.Minute, "Azurite at "+p.StoreAddress(), func(ctx context.Context) error {
		ctx, cancel := context.WithTimeout(ctx, 2*time.Second) // the SDK retries a refused connection for long
		defer cancel()
		_, err := c.Create(ctx, nil)
		if bloberror.HasCode(err, bloberror.ContainerAlreadyExists) {
			return nil
		}
		return err
	})
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
	}{pki.Authorities(p.Cluster), RehearsalProfiles(p.Cluster, p.APIServerIPs())})
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
	return id.Bundle, true, nil
}

func (p *Layout) SaveIdentity() error {
	digest, err := p.identityDigest()
	if err != nil {
		return err
	}
	data, err := json.Marshal(identityFile{Cluster: digest, Bundle: p.Bundle})
	if err != nil {
		return err
	}
	return WriteFile(p.identityPath(), string(data), 0o600)
}

// Clean stops a rehearsal and deletes everything it kept: machines, identity, backups.
func Clean(dir string, progress io.Writer) error {
	if err := StopProcesses(dir, progress); err != nil {
		return err
	}
	return os.RemoveAll(dir)
}

// WriteClientPKI writes what clients outside the machines use: the authorities, the admin's
// kubeconfig and the etcd client pair.
func (p *Layout) WriteClientPKI() error {
	for _, name := range []string{pki.ClusterCA, pki.EtcdCA, pki.Admin, pki.APIServerEtcdClient} {
		kp := p.Bundle.Pair(name)
		if err := WriteFile(p.PKIFile(name, "crt"), kp.CertPEM, 0o644); err != nil {
			return err
		}
		if err := WriteFile(p.PKIFile(name, "key"), kp.KeyPEM, 0o600); err != nil {
			return err
		}
	}
	kubeconfig := machine.EmbeddedKubeconfig(p.Cluster.Name, p.Cluster.APIServerURL(), p.Bundle.Pair(pki.ClusterCA).CertPEM,
		p.Bundle.Pair(pki.Admin).CertPEM, p.Bundle.Pair(pki.Admin).KeyPEM)
	return WriteFile(p.Kubeconfig(), kubeconfig, 0o600)
}
