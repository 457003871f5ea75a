package etcdbackup

import (
	"bytes"
	"context"
	"crypto/rand"
	"io"
	"log"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/clusterforge/clusterforge/components/spec"
	"github.com/clusterforge/clusterforge/test/toolchain"

	"github.com/Azure/azure-sdk-for-go/sdk/storage/azblob/container"
)

// Azurite's development account (not a secret) on the port the tests use.
const (
	azuritePort       = "10090"
	azuriteConnection = "DefaultEndpointsProtocol=http;AccountName=devstoreaccount1;AccountKey=Eby8vdM02xNOcqFlqUwJPLlmEtlCDXJ1OUzFT50uSRZ6IFsuFq2UVErCz4I6tq/K1SZFPTOtr/KBHBeksoGMGw==;BlobEndpoint=http://127.0.0.1:" + azuritePort + "/devstoreaccount1;"
)

// azurite starts the pinned Azurite (make tools) on 127.0.0.1 and opens fresh backup, births and
// retirements containers.
func azurite(t testing.TB, cluster string) (*Store, *Registry) {
	t.Helper()
	bin := toolchain.Binary(t, "bin/azurite-blob")
	cmd := exec.Command(bin, "--blobHost", "127.0.0.1", "--blobPort", azuritePort, "--location", t.TempDir(), "--skipApiVersionCheck", "--loose", "--silent", "--disableTelemetry")
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	var containers []*container.Client
	for _, name := range []string{spec.BackupContainer, spec.BirthsContainer, spec.RetirementsContainer} {
		c, err := container.NewClientFromConnectionString(azuriteConnection, name, nil)
		if err != nil {
			t.Fatal(err)
		}
		for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(200 * time.Millisecond) {
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
			_, err := c.Create(ctx, nil)
			cancel()
			if err == nil {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("Azurite: %v", err)
			}
		}
		containers = append(containers, c)
	}
	return NewStore(containers[0], cluster), NewRegistry(containers[1], containers[2], cluster)
}

func TestStoreBirthUploadAndCorruption(t *testing.T) {
	ctx := context.Background()
	s, registry := azurite(t, "cf-test/etcd-main")
	if err := MayBootstrap(ctx, s, registry); err != nil {
		t.Fatalf("an empty store refused a first bootstrap: %v", err)
	}
	for _, id := range []string{"00000000000000aa", "00000000000000aa", "00000000000000bb"} {
		if err := registry.Register(ctx, id); err != nil {
			t.Fatalf("register %s: %v", id, err)
		}
	}
	if err := MayBootstrap(ctx, s, registry); err == nil || !strings.HasPrefix(err.Error(), RestoreNeeded) {
		t.Fatalf("a born cluster was allowed to bootstrap anew: %v", err)
	}
	other := NewRegistry(registry.births, registry.retirements, "cf-other/etcd-main")
	if err := MayBootstrap(ctx, NewStore(s.container, other.Cluster), other); err != nil {
		t.Fatalf("another cluster's birth blocked this one: %v", err)
	}
	// A deleted backup store leaves the births.
	if err := MayBootstrap(ctx, nil, registry); err == nil || !strings.Contains(err.Error(), "not retired") {
		t.Fatalf("a born cluster whose backup store is gone was allowed to bootstrap anew: %v", err)
	}
	if err := registry.Retire(ctx, "00000000000000aa", "test"); err != nil {
		t.Fatal(err)
	}
	if err := MayBootstrap(ctx, s, registry); err == nil || !strings.Contains(err.Error(), "cluster 00000000000000bb, not retired") {
		t.Fatalf("a retirement of one etcd cluster ID released the other: %v", err)
	}
	if err := registry.Retire(ctx, "00000000000000bb", "test"); err != nil {
		t.Fatal(err)
	}
	if err := MayBootstrap(ctx, s, registry); err != nil {
		t.Fatalf("a retired cluster may not start anew: %v", err)
	}
	// Rebuilt under the same name and addresses, etcd gives the new cluster the old ID: its birth
	// is a new incarnation, not covered by the retirement.
	time.Sleep(10 * time.Millisecond)
	if err := registry.Register(ctx, "00000000000000aa"); err != nil {
		t.Fatal(err)
	}
	if err := MayBootstrap(ctx, s, registry); err == nil || !strings.Contains(err.Error(), "cluster 00000000000000aa, not retired") {
		t.Fatalf("a cluster rebuilt after its retirement was allowed to bootstrap anew: %v", err)
	}
	if _, err := RetireAll(ctx, s, registry, "test"); err != nil {
		t.Fatal(err)
	}

	body := make([]byte, blockSize*2+12345) // three blocks, the last one short
	_, _ = rand.Read(body)
	snap, err := s.Upload(ctx, bytes.NewReader(body), time.Now(), "00000000000000cc", 42)
	if err != nil {
		t.Fatal(err)
	}
	// A snapshot proves its etcd cluster existed, registered or not; and that it runs.
	if err := MayBootstrap(ctx, s, registry); err == nil || !strings.Contains(err.Error(), "cluster 00000000000000cc, not retired") {
		t.Fatalf("a cluster with a snapshot was allowed to bootstrap anew: %v", err)
	}
	if _, err := RetireAll(ctx, s, registry, "test"); err == nil || !strings.Contains(err.Error(), "still runs") {
		t.Fatalf("a cluster with a fresh snapshot was retired: %v", err)
	}
	if snap, err = s.Verify(ctx, snap); err != nil || snap.Verified.IsZero() {
		t.Fatalf("verify: %v %v", snap, err)
	}
	listed, err := s.Find(ctx, "")
	if err != nil || listed.SHA256 != snap.SHA256 || listed.Size != int64(len(body)) || listed.Revision != 42 || listed.Verified.IsZero() {
		t.Fatalf("listed %+v, uploaded %+v (%v)", listed, snap, err)
	}
	var got bytes.Buffer
	if err := s.Download(ctx, listed, &got); err != nil || !bytes.Equal(got.Bytes(), body) {
		t.Fatalf("download: %v, %d bytes equal %v", err, got.Len(), bytes.Equal(got.Bytes(), body))
	}
	// The same name overwritten with other bytes, its metadata kept: Download must refuse it.
	if _, err := s.container.NewBlockBlobClient(s.snapshotName(snap.Name)).UploadBuffer(ctx, body[:100], nil); err != nil {
		t.Fatal(err)
	}
	if err := s.Download(ctx, listed, &got); err == nil || !strings.Contains(err.Error(), snap.Name) {
		t.Fatalf("a corrupt object was accepted: %v", err)
	}
	if _, err := s.Find(ctx, "../born"); err == nil || !strings.Contains(err.Error(), "not a snapshot name") {
		t.Fatalf("Find accepted a path: %v", err)
	}
}

// A snapshot taken by the agent restores, with the real etcdutl, into a member the real etcd
// starts and serves the data from; a data dir a running etcd holds is refused untouched.
func TestRealEtcdSnapshotRestoresIntoAWorkingMember(t *testing.T) {
	ctx := context.Background()
	etcdBin := toolchain.Binary(t, "bin/etcd")
	etcdutl := toolchain.Binary(t, "bin/etcdutl")
	live := t.TempDir()
	cli, endpoint, stop := startEtcd(t, etcdBin, live, "original")
	if _, err := cli.Put(ctx, "/registry/namespaces/kept", "v1"); err != nil {
		t.Fatal(err)
	}
	store, registry := azurite(t, "cf-test/etcd-main")
	agent := &Agent{Etcd: cli, Endpoint: endpoint, Store: store, Registry: registry, Interval: time.Hour, Retention: DefaultRetention(), Log: log.New(io.Discard, "", 0)}
	snap, err := agent.Snapshot(ctx)
	if err != nil {
		t.Fatal(err)
	}
	member := Member{Name: "restored", PeerURL: "http://127.0.0.1:23800", InitialCluster: "restored=http://127.0.0.1:23800", Token: "restored-1"}

	member.DataDir = live
	if err := RestoreMember(ctx, store, snap, member, etcdutl); err == nil || !strings.Contains(err.Error(), "stop etcd") {
		t.Fatalf("restore over a running member answered %v", err)
	}
	if _, err := cli.Get(ctx, "/registry/namespaces/kept"); err != nil {
		t.Fatalf("the running member was disturbed: %v", err)
	}

	member.DataDir = t.TempDir()
	if err := RestoreMember(ctx, store, snap, member, etcdutl); err != nil {
		t.Fatal(err)
	}
	stop()
	restored, _, _ := startEtcd(t, etcdBin, member.DataDir, member.Name)
	resp, err := restored.Get(ctx, "/registry/namespaces/kept")
	if err != nil || len(resp.Kvs) != 1 || string(resp.Kvs[0].Value) != "v1" {
		t.Fatalf("the restored member serves %v (%v), want the key written before the snapshot", resp, err)
	}
	status, err := restored.Status(ctx, endpoint)
	if err != nil || ClusterIDString(status.Header.ClusterId) == snap.ClusterID {
		t.Errorf("the restored cluster kept the identity %s (%v); a restore gives a fresh one", snap.ClusterID, err)
	}
}
