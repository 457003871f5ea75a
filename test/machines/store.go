package machines

import (
	"context"
	"net"
	"net/http"
	"path/filepath"
	"strconv"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/storage/azblob/bloberror"
	"github.com/Azure/azure-sdk-for-go/sdk/storage/azblob/container"

	"github.com/clusterforge/clusterforge/components/etcdbackup"
	"github.com/clusterforge/clusterforge/components/machine"
	"github.com/clusterforge/clusterforge/components/spec"
)

// Azurite's well-known development account (deviation "backup store"); not a secret.
const (
	devAccount    = "devstoreaccount1"
	devAccountKey = "Eby8vdM02xNOcqFlqUwJPLlmEtlCDXJ1OUzFT50uSRZ6IFsuFq2UVErCz4I6tq/K1SZFPTOtr/KBHBeksoGMGw=="
	storePortBase = 10000
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
	return net.JoinHostPort(host, strconv.Itoa(storePortBase+p.Base))
}

// StoreConnectionString reaches the rehearsal's Azurite with the development account.
func (p *Layout) StoreConnectionString() string {
	return "DefaultEndpointsProtocol=http;AccountName=" + devAccount + ";AccountKey=" + devAccountKey +
		";BlobEndpoint=http://" + p.StoreAddress() + "/" + devAccount + ";"
}

// backupSettings are the main etcd's backup agent's settings, whose store the rehearsal reaches.
func (p *Layout) backupSettings() machine.EtcdBackupSettings {
	return machine.EtcdBackupFor(p.Cluster, p.Cluster.EtcdClusters()[0])
}

// BackupStore opens the main etcd's folder of the rehearsal's store, as the agent does.
func (p *Layout) BackupStore() (*etcdbackup.Store, error) {
	c, err := container.NewClientFromConnectionString(p.StoreConnectionString(), spec.BackupContainer, nil)
	if err != nil {
		return nil, err
	}
	return etcdbackup.NewStore(c, p.backupSettings().Cluster), nil
}

// BirthRegistry opens the main etcd's entries in the rehearsal's birth registry. Azurite has no
// immutability policy: here the births are as deletable as any blob (deviation "backup store").
func (p *Layout) BirthRegistry() (*etcdbackup.Registry, error) {
	births, err := container.NewClientFromConnectionString(p.StoreConnectionString(), spec.BirthsContainer, nil)
	if err != nil {
		return nil, err
	}
	retirements, err := container.NewClientFromConnectionString(p.StoreConnectionString(), spec.RetirementsContainer, nil)
	if err != nil {
		return nil, err
	}
	return etcdbackup.NewRegistry(births, retirements, p.backupSettings().Cluster), nil
}

// CreateBackupContainers creates the backups' and the birth registry's containers once the store
// answers, as the Pulumi program does before any etcd machine exists.
func (p *Layout) CreateBackupContainers(ctx context.Context) error {
	var opts *container.ClientOptions
	if p.Dial != nil {
		opts = &container.ClientOptions{}
		opts.Transport = &http.Client{Transport: &http.Transport{DialContext: p.Dial}}
	}
	for _, name := range []string{spec.BackupContainer, spec.BirthsContainer, spec.RetirementsContainer} {
		c, err := container.NewClientFromConnectionString(p.StoreConnectionString(), name, opts)
		if err != nil {
			return err
		}
		if err := Poll(ctx, time.Minute, "Azurite at "+p.StoreAddress(), func(ctx context.Context) error {
			ctx, cancel := context.WithTimeout(ctx, 2*time.Second) // the SDK retries a refused connection for long
			defer cancel()
			_, err := c.Create(ctx, nil)
			if bloberror.HasCode(err, bloberror.ContainerAlreadyExists) {
				return nil
			}
			return err
		}); err != nil {
			return err
		}
	}
	return nil
}

// StoreCommand is Azurite serving the backup store at StoreAddress, its data in StoreDir.
func (p *Layout) StoreCommand() []string {
	host, port, _ := net.SplitHostPort(p.StoreAddress())
	return []string{filepath.Join(p.Tools, "azurite-blob"), "--blobHost", host, "--blobPort", port,
		"--location", p.StoreDir(), "--skipApiVersionCheck", "--loose", "--silent", "--disableTelemetry"}
}
