// Package etcdbackup keeps an etcd cluster's history outside its machines: snapshots taken through
// etcd's client API and written to Azure Blob Storage (Azurite locally), a registry outside the
// cluster's resource group that proves whether a cluster ever existed, the gate that lets a member with an empty disk start a
// new cluster only when it never did, the tiered retention, the verified restore of one member,
// and the "is it safe to touch etcd now" answer later work asks before changing anything.
// It has no Pulumi import: the Pulumi program, the machines and the rehearsal share it.
package etcdbackup

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"path"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore/streaming"
	"github.com/Azure/azure-sdk-for-go/sdk/azcore/to"
	"github.com/Azure/azure-sdk-for-go/sdk/storage/azblob/blob"
	"github.com/Azure/azure-sdk-for-go/sdk/storage/azblob/bloberror"
	"github.com/Azure/azure-sdk-for-go/sdk/storage/azblob/blockblob"
	"github.com/Azure/azure-sdk-for-go/sdk/storage/azblob/container"
)

// Metadata keys every snapshot object carries.
const (
	metaCluster   = "cluster"       // the stack's cluster name and etcd role
	metaClusterID = "etcdclusterid" // etcd's own cluster ID, new after every restore
	metaRevision  = "revision"      // etcd revision the snapshot holds at least
	metaSHA256    = "sha256"        // of the whole object
	metaSize      = "size"          // bytes
	metaVerified  = "verified"      // RFC 3339 time the object was read back and matched
)

// blockSize is how much of a snapshot is staged per request; the object becomes visible only when
// the block list is committed, so an interrupted upload never leaves a partial snapshot.
const blockSize = 8 << 20

// timeLayout names snapshots so that names sort by time.
const timeLayout = "20060102T150405Z"

// snapshotName is the form Upload names snapshots with.
var snapshotName = regexp.MustCompile(`^[0-9]{8}T[0-9]{6}Z-r[0-9]+\.db$`)

// quoted shows untrusted text safely in a message, cut to 64 bytes.
func quoted(s string) string { return strconv.Quote(s[:min(len(s), 64)]) }

// Snapshot is one stored snapshot.
type Snapshot struct {
	// Name is the object's name under the cluster's snapshots/ folder, e.g. 20261123T174000Z-r1234.db.
	Name      string
	Taken     time.Time
	ClusterID string
	Revision  int64
	SHA256    string
	Size      int64
	// Verified is when the stored bytes were last read back and matched SHA256; zero if never.
	Verified time.Time
}

// Store is one cluster's folder in a blob container: <cluster>/snapshots/ and <cluster>/deltas/.
type Store struct {
	container *container.Client
	// Cluster is the identity every object carries: "<cluster name>/<etcd role>".
	Cluster string
}

// NewStore opens the cluster's folder in a container.
func NewStore(c *container.Client, cluster string) *Store {
	return &Store{container: c, Cluster: cluster}
}

func (s *Store) snapshotName(name string) string { return s.Cluster + "/snapshots/" + name }

// Upload streams a snapshot into the store in blocks, hashing as it goes, and commits it with
// its metadata. Nothing is visible under the name until the commit.
func (s *Store) Upload(ctx context.Context, r io.Reader, taken time.Time, clusterID string, revision int64) (Snapshot, error) {
	snap := Snapshot{Name: taken.UTC().Format(timeLayout) + "-r" + strconv.FormatInt(revision, 10) + ".db",
		Taken: taken.UTC().Truncate(time.Second), ClusterID: clusterID, Revision: revision}
	client := s.container.NewBlockBlobClient(s.snapshotName(snap.Name))
	hash := sha256.New()
	buf := make([]byte, blockSize)
	var ids []string
	for {
		n, err := io.ReadFull(r, buf)
		if n > 0 {
			hash.Write(buf[:n])
			id := base64.StdEncoding.EncodeToString([]byte(fmt.Sprintf("%08d", len(ids))))
			if _, err := client.StageBlock(ctx, id, streaming.NopCloser(bytes.NewReader(buf[:n])), nil); err != nil {
				return Snapshot{}, fmt.Errorf("upload %s: %w", snap.Name, err)
			}
			ids = append(ids, id)
			snap.Size += int64(n)
		}
		if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
			break
		}
		if err != nil {
			return Snapshot{}, fmt.Errorf("read snapshot from etcd: %w", err)
		}
	}
	snap.SHA256 = hex.EncodeToString(hash.Sum(nil))
	_, err := client.CommitBlockList(ctx, ids, &blockblob.CommitBlockListOptions{Metadata: snap.metadata(s.Cluster)})
	if err != nil {
		return Snapshot{}, fmt.Errorf("commit %s: %w", snap.Name, err)
	}
	return snap, nil
}

func (snap Snapshot) metadata(cluster string) map[string]*string {
	m := map[string]*string{
		metaCluster:   to.Ptr(cluster),
		metaClusterID: to.Ptr(snap.ClusterID),
		metaRevision:  to.Ptr(strconv.FormatInt(snap.Revision, 10)),
		metaSHA256:    to.Ptr(snap.SHA256),
		metaSize:      to.Ptr(strconv.FormatInt(snap.Size, 10)),
	}
	if !snap.Verified.IsZero() {
		m[metaVerified] = to.Ptr(snap.Verified.UTC().Format(time.RFC3339))
	}
	return m
}

// Verify reads a snapshot back and checks its size and checksum against its metadata, then
// records the verification on the object. A mismatch names the object.
func (s *Store) Verify(ctx context.Context, snap Snapshot) (Snapshot, error) {
	if err := s.Download(ctx, snap, io.Discard); err != nil {
		return snap, err
	}
	snap.Verified = time.Now().UTC().Truncate(time.Second)
	if _, err := s.container.NewBlobClient(s.snapshotName(snap.Name)).SetMetadata(ctx, snap.metadata(s.Cluster), nil); err != nil {
		return snap, fmt.Errorf("record verification of %s: %w", snap.Name, err)
	}
	return snap, nil
}

// Download writes a snapshot to w and fails, naming the object, unless every byte matches the
// size and checksum it was stored with. w may have received bytes by then: callers write to a
// scratch file.
func (s *Store) Download(ctx context.Context, snap Snapshot, w io.Writer) error {
	resp, err := s.container.NewBlobClient(s.snapshotName(snap.Name)).DownloadStream(ctx, nil)
	if err != nil {
		return fmt.Errorf("download %s: %w", snap.Name, err)
	}
	defer resp.Body.Close()
	hash := sha256.New()
	n, err := io.Copy(io.MultiWriter(w, hash), resp.Body)
	if err != nil {
		return fmt.Errorf("download %s: %w", snap.Name, err)
	}
	if got := hex.EncodeToString(hash.Sum(nil)); n != snap.Size || got != snap.SHA256 {
		return fmt.Errorf("snapshot %s is corrupt or partial: %d bytes with sha256 %s, stored as %d bytes with sha256 %s; choose another with SNAPSHOT=<name>",
			snap.Name, n, got, snap.Size, snap.SHA256)
	}
	return nil
}

// List returns the cluster's snapshots, oldest first. An object without complete metadata is
// listed with an empty SHA256, so restore refuses it by name.
func (s *Store) List(ctx context.Context) ([]Snapshot, error) {
	return list(ctx, s, s.snapshotName(""), parseSnapshot) // the service lists names in order, and names sort by time
}

// list parses every object under prefix, in the service's (name) order.
func list[T any](ctx context.Context, s *Store, prefix string, parse func(name string, get func(key string) string) T) ([]T, error) {
	pager := s.container.NewListBlobsFlatPager(&container.ListBlobsFlatOptions{Prefix: &prefix, Include: container.ListBlobsInclude{Metadata: true}})
	var out []T
	for pager.More() {
		page, err := pager.NextPage(ctx)
		if err != nil {
			return nil, fmt.Errorf("list %s: %w", prefix, err)
		}
		for _, item := range page.Segment.BlobItems {
			// The service may change a metadata key's case.
			get := func(key string) string {
				for k, v := range item.Metadata {
					if strings.EqualFold(k, key) {
						return deref(v)
					}
				}
				return ""
			}
			out = append(out, parse(strings.TrimPrefix(deref(item.Name), prefix), get))
		}
	}
	return out, nil
}

func parseSnapshot(name string, get func(key string) string) Snapshot {
	snap := Snapshot{Name: name, ClusterID: get(metaClusterID), SHA256: get(metaSHA256)}
	snap.Taken, _ = time.Parse(timeLayout, strings.SplitN(path.Base(name), "-", 2)[0])
	snap.Revision, _ = strconv.ParseInt(get(metaRevision), 10, 64)
	snap.Size, _ = strconv.ParseInt(get(metaSize), 10, 64)
	snap.Verified, _ = time.Parse(time.RFC3339, get(metaVerified))
	return snap
}

// Find returns the named snapshot, or when name is empty the latest one verified after upload.
func (s *Store) Find(ctx context.Context, name string) (Snapshot, error) {
	snaps, err := s.List(ctx)
	if err != nil {
		return Snapshot{}, err
	}
	if name == "" {
		if newest := newestVerified(snaps, 1); len(newest) == 1 {
			return newest[0], nil
		}
		return Snapshot{}, fmt.Errorf("%w of %s in the store", ErrNoVerifiedSnapshot, s.Cluster)
	}
	if !snapshotName.MatchString(name) {
		return Snapshot{}, fmt.Errorf("snapshot %s is not a snapshot name such as 20261123T174000Z-r1234.db; `clusterforge-etcd-backup list` shows them", quoted(name))
	}
	for _, snap := range snaps {
		if snap.Name == name {
			return snap, nil
		}
	}
	return Snapshot{}, fmt.Errorf("no snapshot %s of %s; `clusterforge-etcd-backup list` shows them", quoted(name), s.Cluster)
}

// ErrNoVerifiedSnapshot is wrapped by Find when the store holds no snapshot read back and matched.
var ErrNoVerifiedSnapshot = errors.New("no verified snapshot")

// Delete removes one snapshot (soft delete and versioning keep it recoverable on Azure).
func (s *Store) Delete(ctx context.Context, name string) error {
	_, err := s.container.NewBlobClient(s.snapshotName(name)).Delete(ctx, &blob.DeleteOptions{})
	if err != nil && !bloberror.HasCode(err, bloberror.BlobNotFound) {
		return fmt.Errorf("delete %s: %w", name, err)
	}
	return nil
}

func deref[T any](p *T) T {
	var zero T
	if p == nil {
		return zero
	}
	return *p
}
