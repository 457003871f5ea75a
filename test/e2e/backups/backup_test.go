package backups_test

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/storage/azblob/container"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/clusterforge/clusterforge/components/etcdbackup"
	"github.com/clusterforge/clusterforge/components/machine"
	"github.com/clusterforge/clusterforge/components/spec"
	"github.com/clusterforge/clusterforge/components/wellknown"
	"github.com/clusterforge/clusterforge/test/drills"
	"github.com/clusterforge/clusterforge/test/e2e/framework"
	"github.com/clusterforge/clusterforge/test/machines"
	"github.com/clusterforge/clusterforge/test/machines/processes"
)

// Check 8: the main etcd is backed up by its leader's agent; the gate needs a fresh verified
// snapshot and a reachable store; after all five members lose their disks they refuse to start
// an empty cluster, nothing serves, and the restore brings back every write acknowledged before
// the snapshot, refusing a corrupt snapshot by name first.
func TestEtcdBackupAndTotalLoss(t *testing.T) {
	framework.NeedRehearsal(t)
	ctx := context.Background()
	store, err := framework.Running.BackupStore()
	if err != nil {
		t.Fatal(err)
	}
	cli, err := framework.Running.EtcdClient(spec.RoleEtcdMain)
	if err != nil {
		t.Fatal(err)
	}
	defer cli.Close()
	interval, _ := time.ParseDuration(framework.Running.Cluster.Backup.Interval)

	// The leader's agent snapshots at once when the store holds none, and verifies it.
	if err := drills.WaitUntil(2*time.Minute, func() error { return etcdbackup.SafeToTouch(ctx, cli, store, interval) }); err != nil {
		t.Fatalf("the gate never opened on a healthy cluster: %v", err)
	}
	if err := framework.Running.EtcdGate(ctx); err != nil {
		t.Fatalf("the gate command disagrees with the gate: %v", err)
	}
	if born, err := store.Born(ctx); err != nil || born.IsZero() {
		t.Fatalf("no birth marker after the first snapshot: %v %v", born, err)
	}

	t.Run("store down closes the gate", func(t *testing.T) {
		if err := framework.Running.Stop("store", "azurite", syscall.SIGTERM); err != nil {
			t.Fatal(err)
		}
		gctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
		defer cancel()
		if err := etcdbackup.SafeToTouch(gctx, cli, store, interval); err == nil || !strings.Contains(err.Error(), "backup store") {
			t.Errorf("the gate answered %v with the store down, want a refusal naming the backup store", err)
		}
		if err := framework.Running.EtcdGate(gctx); err == nil || !strings.Contains(err.Error(), "backup store") {
			t.Errorf("the gate command answered %v with the store down, want a refusal naming the backup store", err)
		}
		if err := framework.Running.StartStore(ctx); err != nil {
			t.Fatal(err)
		}
		if err := etcdbackup.SafeToTouch(ctx, cli, store, interval); err != nil {
			t.Errorf("the gate stayed closed after the store came back: %v", err)
		}
	})

	cs := framework.Clientset(t)
	ns := drills.Namespace(t, cs, "drill-total-loss")
	writer := drills.StartWriter(framework.Clientset(t), ns)
	time.Sleep(3 * time.Second)
	snap, err := framework.Running.BackupEtcd(ctx) // make etcd-backup
	if err != nil {
		writer.Stop()
		t.Fatal(err)
	}
	time.Sleep(3 * time.Second)

	members := framework.Running.Of(spec.RoleEtcdMain)
	framework.StopAll(t, members, "etcd")
	for _, in := range members {
		if err := os.RemoveAll(filepath.Join(framework.Running.Root(in.Name), machine.EtcdDataDir, "member")); err != nil {
			t.Fatal(err)
		}
	}
	acked := writer.Stop()
	t.Logf("total loss: %d writes acknowledged, snapshot %s taken at %s", len(acked), snap.Name, snap.Taken.Format(time.RFC3339))

	// The wiped members come back: none may start a cluster; each says why, and keeps retrying.
	bootCtx, cancel := context.WithCancel(ctx)
	var wg sync.WaitGroup
	for _, in := range members {
		wg.Add(1)
		go func() { defer wg.Done(); _ = framework.Running.Boot(bootCtx, in.Name) }()
	}
	err = drills.WaitUntil(time.Minute, func() error {
		for _, in := range members {
			if status, _ := os.ReadFile(filepath.Join(framework.Running.Root(in.Name), machine.EtcdStatusFile)); !strings.HasPrefix(string(status), etcdbackup.RestoreNeeded) {
				return fmt.Errorf("%s status %q, want %s", in.Name, status, etcdbackup.RestoreNeeded)
			}
		}
		return nil
	})
	time.Sleep(6 * time.Second) // one more retry of every join
	cancel()
	wg.Wait()
	if err != nil {
		t.Error(err)
	}
	for _, in := range members {
		if p := framework.Running.Proc(in.Name, "etcd"); p != nil && p.Alive() {
			t.Errorf("%s started etcd over an empty data dir", in.Name)
		}
		if v := agentMetric(t, in, wellknown.EtcdRestoreNeededMetric); v != "1" {
			t.Errorf("%s %s = %q, want 1", in.Name, wellknown.EtcdRestoreNeededMetric, v)
		}
	}
	if code, _, err := framework.Running.Get(ctx, framework.Running.Cluster.APIServerURL()+"/readyz"); err == nil && code == http.StatusOK {
		t.Errorf("/readyz answered 200 with no etcd")
	}
	if _, err := cs.CoreV1().Namespaces().Get(ctx, ns, metav1.GetOptions{}); err == nil {
		t.Errorf("an apiserver served a read with every etcd member gone")
	}

	corrupt := corruptCopy(t, store, snap)
	if _, err := framework.Running.RestoreEtcd(ctx, ""); err == nil || !strings.Contains(err.Error(), corrupt) {
		t.Fatalf("restore of the latest snapshot, a corrupt copy, answered %v; want a refusal naming %s", err, corrupt)
	}
	restored, err := framework.Running.RestoreEtcd(ctx, snap.Name) // make etcd-restore SNAPSHOT=<name>
	if err != nil {
		t.Fatal(err)
	}
	list, err := cs.CoreV1().ConfigMaps(ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	present := map[string]bool{}
	for _, cm := range list.Items {
		present[cm.Name] = true
	}
	var lost int
	var lastLost time.Time
	for name, at := range acked {
		switch {
		case present[name]:
		case at.Before(restored.Taken):
			t.Errorf("write %s, acknowledged at %s before the snapshot, is lost", name, at.Format(time.RFC3339Nano))
		default:
			lost++
			if at.After(lastLost) {
				lastLost = at
			}
		}
	}
	t.Logf("restored from %s: %d acknowledged writes present, %d acknowledged after the snapshot lost (the last %s after it)",
		restored.Name, len(acked)-lost, lost, lastLost.Sub(restored.Taken).Round(time.Millisecond))
	if _, err := cs.CoreV1().ConfigMaps(ns).Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "after-restore"}}, metav1.CreateOptions{}); err != nil {
		t.Errorf("write after the restore: %v", err)
	}
	if err := store.Delete(ctx, corrupt); err != nil {
		t.Fatal(err)
	}

	// The whole rehearsal stopped and every etcd-main disk wiped, as a deallocation does: brought
	// up again, it finds its history in the store, refuses, and comes back from it.
	t.Run("brought up again over wiped disks", func(t *testing.T) {
		if _, err := framework.Running.BackupEtcd(ctx); err != nil {
			t.Fatal(err)
		}
		layout := framework.Running.Layout
		if err := framework.Running.Down(); err != nil {
			t.Fatal(err)
		}
		for _, in := range members {
			if err := os.RemoveAll(filepath.Join(layout.Root(in.Name), machine.EtcdDataDir, "member")); err != nil {
				t.Fatal(err)
			}
		}
		upCtx, cancel := context.WithTimeout(ctx, 5*time.Minute)
		defer cancel()
		if _, err := processes.Up(upCtx, layout, io.Discard); err == nil || !strings.Contains(err.Error(), etcdbackup.RestoreNeeded) {
			t.Fatalf("up over wiped disks answered %v, want a refusal saying %s", err, etcdbackup.RestoreNeeded)
		}
		if _, err := processes.RestoreStopped(upCtx, layout, "", io.Discard); err != nil {
			t.Fatal(err)
		}
		if framework.Running, err = processes.Up(upCtx, layout, os.Stderr); err != nil {
			t.Fatalf("up after the restore: %v", err) // every later check fails with it
		}
		if _, err := framework.Clientset(t).CoreV1().ConfigMaps(ns).Get(ctx, "after-restore", metav1.GetOptions{}); err != nil {
			t.Errorf("the write before the last snapshot is missing: %v", err)
		}
	})
}

// corruptCopy stores a truncated copy of snap under a newer name, with snap's checksum and a
// verification mark: an object that went bad at rest after it was verified.
func corruptCopy(t *testing.T, store *etcdbackup.Store, snap etcdbackup.Snapshot) string {
	t.Helper()
	var buf bytes.Buffer
	if err := store.Download(context.Background(), snap, &buf); err != nil {
		t.Fatal(err)
	}
	taken := time.Now()
	bad, err := store.Upload(context.Background(), io.LimitReader(&buf, int64(buf.Len()/2)), taken, snap.ClusterID, snap.Revision)
	if err != nil {
		t.Fatal(err)
	}
	c, err := container.NewClientFromConnectionString(framework.Running.StoreConnectionString(), spec.BackupContainer, nil)
	if err != nil {
		t.Fatal(err)
	}
	meta := map[string]*string{"cluster": &store.Cluster, "etcdclusterid": &snap.ClusterID, "revision": framework.Ptr(strconv.FormatInt(snap.Revision, 10)),
		"sha256": &snap.SHA256, "size": framework.Ptr(strconv.FormatInt(snap.Size, 10)), "verified": framework.Ptr(time.Now().UTC().Format(time.RFC3339))}
	if _, err := c.NewBlobClient(store.Cluster+"/snapshots/"+bad.Name).SetMetadata(context.Background(), meta, nil); err != nil {
		t.Fatal(err)
	}
	return bad.Name
}

func agentMetric(t *testing.T, in machines.Instance, name string) string {
	t.Helper()
	resp, err := http.Get(fmt.Sprintf("http://%s:%d/metrics", in.IP, wellknown.EtcdBackupMetricsPort))
	if err != nil {
		t.Errorf("%s backup agent metrics: %v", in.Name, err)
		return ""
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	for _, line := range strings.Split(string(body), "\n") {
		if v, ok := strings.CutPrefix(line, name+" "); ok {
			return v
		}
	}
	return ""
}
