package etcdbackup

import (
	"context"
	"fmt"
	"net/url"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore"
	"github.com/Azure/azure-sdk-for-go/sdk/azcore/to"
	"github.com/Azure/azure-sdk-for-go/sdk/storage/azblob/blob"
	"github.com/Azure/azure-sdk-for-go/sdk/storage/azblob/blockblob"
	"github.com/Azure/azure-sdk-for-go/sdk/storage/azblob/container"
)

// Registry is the evidence that a cluster's etcd ever existed, kept outside the cluster's resource
// group (spec.Cluster.BirthRegistryResourceGroup): births of each etcd cluster ID that had quorum,
// in a container the members may add to but Azure keeps immutable, and the retirements an
// operator writes, in a container the members may only read, to end a cluster on purpose.
//
// A cluster rebuilt under the same name and addresses gets the same etcd cluster ID, so an entry
// is one incarnation: <cluster>/<etcd cluster ID>/<time>. An ID stands retired only if no birth
// or snapshot of it is newer than its newest retirement.
type Registry struct {
	births, retirements *container.Client
	// Cluster is the identity the entries are filed under: "<cluster name>/<etcd role>".
	Cluster string
}

// NewRegistry opens the cluster's entries in the births and retirements containers.
func NewRegistry(births, retirements *container.Client, cluster string) *Registry {
	return &Registry{births: births, retirements: retirements, Cluster: cluster}
}

// Register records that clusterID has quorum, unless a birth of it newer than its newest
// retirement is there already.
func (r *Registry) Register(ctx context.Context, clusterID string) error {
	births, err := r.entries(ctx, r.births)
	if err != nil {
		return err
	}
	retired, err := r.entries(ctx, r.retirements)
	if err != nil {
		return err
	}
	if births[clusterID].After(retired[clusterID]) {
		return nil
	}
	return r.create(ctx, r.births, clusterID, "had quorum")
}

// Retire records that an operator ended clusterID on purpose: a member with an empty disk may
// then start the cluster anew, if no other unretired ID remains.
func (r *Registry) Retire(ctx context.Context, clusterID, why string) error {
	return r.create(ctx, r.retirements, clusterID, "retired: "+why)
}

func (r *Registry) create(ctx context.Context, c *container.Client, clusterID, what string) error {
	now := time.Now().UTC()
	name := r.Cluster + "/" + clusterID + "/" + now.Format(time.RFC3339Nano)
	body := "etcd cluster " + clusterID + " of " + r.Cluster + " " + what + " at " + now.Format(time.RFC3339) + "\n"
	_, err := c.NewBlockBlobClient(name).UploadBuffer(ctx, []byte(body), &blockblob.UploadBufferOptions{
		Metadata:         map[string]*string{metaCluster: to.Ptr(r.Cluster), metaClusterID: to.Ptr(clusterID)},
		AccessConditions: &blob.AccessConditions{ModifiedAccessConditions: &blob.ModifiedAccessConditions{IfNoneMatch: to.Ptr(azcore.ETagAny)}},
	})
	if err != nil {
		return fmt.Errorf("write %s in %s: %w", name, c.URL(), err)
	}
	return nil
}

// entries maps each cluster ID filed in c to its newest entry's time, as the store recorded it.
// Every version counts: an entry overwritten or deleted still happened.
func (r *Registry) entries(ctx context.Context, c *container.Client) (map[string]time.Time, error) {
	prefix := r.Cluster + "/"
	found := map[string]time.Time{}
	pager := c.NewListBlobsFlatPager(&container.ListBlobsFlatOptions{Prefix: &prefix, Include: container.ListBlobsInclude{Versions: true, Deleted: true}})
	for pager.More() {
		page, err := pager.NextPage(ctx)
		if err != nil {
			return nil, fmt.Errorf("list %s in %s: %w", prefix, c.URL(), err)
		}
		for _, item := range page.Segment.BlobItems {
			// The store keeps creation times to the second; the name, to the nanosecond, orders a
			// retirement and a rebirth within one second. The later of the two counts: a birth
			// dated late only widens what stands unretired.
			id, at, _ := strings.Cut(strings.TrimPrefix(deref(item.Name), prefix), "/")
			named, _ := time.Parse(time.RFC3339Nano, at)
			found[id] = later(found[id], later(deref(item.Properties.CreationTime), named))
		}
	}
	return found, nil
}

func later(a, b time.Time) time.Time {
	if b.After(a) {
		return b
	}
	return a
}

// Existence is what the store and the registry say about a cluster's past.
type Existence struct {
	// Since is the earliest trace of an unretired etcd cluster ID; zero if there is none.
	Since time.Time
	// Unretired are the etcd cluster IDs with a birth or a snapshot newer than their newest
	// retirement.
	Unretired []string
	// Newest is the newest snapshot's time, zero without one: a store written to lately belongs
	// to a cluster that runs.
	Newest time.Time
}

// Existed gathers every etcd cluster ID the registry's births and the store's snapshots name, less
// the retired ones. Either source alone proves existence: a deleted backup account leaves the
// births, and a cluster older than its registry left snapshots. A nil store is a deleted one.
func Existed(ctx context.Context, s *Store, r *Registry) (Existence, error) {
	var e Existence
	births, err := r.entries(ctx, r.births)
	if err != nil {
		return e, err
	}
	retired, err := r.entries(ctx, r.retirements)
	if err != nil {
		return e, err
	}
	var snaps []Snapshot
	if s != nil {
		if snaps, err = s.List(ctx); err != nil {
			return e, err
		}
	}
	first := map[string]time.Time{} // each ID's earliest trace after its newest retirement
	trace := func(id string, at time.Time) {
		if id == "" || !at.After(retired[id]) {
			return
		}
		if t, ok := first[id]; !ok || at.Before(t) {
			first[id] = at
		}
	}
	for id, at := range births {
		trace(id, at)
	}
	for _, snap := range snaps {
		trace(snap.ClusterID, snap.Taken)
		e.Newest = later(e.Newest, snap.Taken)
	}
	for id, at := range first {
		e.Unretired = append(e.Unretired, id)
		if e.Since.IsZero() || at.Before(e.Since) {
			e.Since = at
		}
	}
	slices.Sort(e.Unretired)
	return e, nil
}

// ConnectionStringEnv, when set, reaches every container with that connection string instead of
// Entra ID (Azurite in the rehearsal; deviation "backup store").
const ConnectionStringEnv = "AZURE_STORAGE_CONNECTION_STRING"

// Open reaches a cluster's backup store and birth registry by their containers' URLs, with
// ConnectionStringEnv when set, else with the credential newCredential makes.
func Open(cluster, storeURL, birthsURL, retirementsURL string, newCredential func() (azcore.TokenCredential, error)) (*Store, *Registry, error) {
	var containers []*container.Client
	for _, u := range []string{storeURL, birthsURL, retirementsURL} {
		c, err := openContainer(u, newCredential)
		if err != nil {
			return nil, nil, err
		}
		containers = append(containers, c)
	}
	return NewStore(containers[0], cluster), NewRegistry(containers[1], containers[2], cluster), nil
}

func openContainer(rawURL string, newCredential func() (azcore.TokenCredential, error)) (*container.Client, error) {
	u, err := url.Parse(rawURL)
	if err != nil {
		return nil, fmt.Errorf("container URL: %w", err)
	}
	var c *container.Client
	if cs := os.Getenv(ConnectionStringEnv); cs != "" {
		c, err = container.NewClientFromConnectionString(cs, strings.Trim(u.Path, "/"), nil)
	} else {
		var cred azcore.TokenCredential
		if cred, err = newCredential(); err == nil {
			c, err = container.NewClient(rawURL, cred, nil)
		}
	}
	if err != nil {
		return nil, fmt.Errorf("container %s: %w", rawURL, err)
	}
	return c, nil
}

// RetireAfter is how long a cluster's store must have been quiet before RetireAll retires it: a
// snapshot younger than this belongs to a cluster that still runs.
const RetireAfter = time.Hour

// RetireAll retires every etcd cluster ID the registry or the store (nil if deleted) still counts
// as existing and returns them: after it, a member with an empty disk may start this cluster's
// name anew. It refuses while the store holds a snapshot younger than RetireAfter.
func RetireAll(ctx context.Context, s *Store, r *Registry, why string) ([]string, error) {
	existed, err := Existed(ctx, s, r)
	if err != nil {
		return nil, err
	}
	if age := time.Since(existed.Newest); !existed.Newest.IsZero() && age < RetireAfter {
		return nil, fmt.Errorf("%s took a snapshot %s ago: it still runs; retire a cluster only after its machines are gone", r.Cluster, age.Round(time.Second))
	}
	for _, id := range existed.Unretired {
		if err := r.Retire(ctx, id, why); err != nil {
			return nil, err
		}
	}
	return existed.Unretired, nil
}
