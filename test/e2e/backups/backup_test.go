package backups_test

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/storage/azblob/container"
	"go.etcd.io/etcd/api/v3/etcdserverpb"
	clientv3 "go.etcd.io/etcd/client/v3"
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

// Check 8: the main etcd is backed up by its leader's agent, in snapshots and a stream of deltas;
// the gate needs a fresh verified snapshot and a reachable store; after all five members are
// killed and lose their disks while writes flow, they refuse to start an empty cluster, nothing
// serves, and the restore (the newest verified snapshot and the deltas after it) brings back
// every write acknowledged more than a second before the kill, refusing a corrupt snapshot by
// name first.
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
	registry, err := framework.Running.BirthRegistry()
	if err != nil {
		t.Fatal(err)
	}
	status, err := cli.Get(ctx, "/registry/", clientv3.WithCountOnly())
	if err != nil {
		t.Fatal(err)
	}
	running := etcdbackup.ClusterIDString(status.Header.ClusterId)
	if existed, err := etcdbackup.Existed(ctx, nil, registry); err != nil || !slices.Contains(existed.Unretired, running) {
		t.Fatalf("the running etcd cluster %s is not in the birth registry after the first snapshot: %+v %v", running, existed, err)
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
	members := framework.Running.Of(spec.RoleEtcdMain)

	t.Run("leadership moves mid-stream", func(t *testing.T) {
		writer := drills.StartWriter(cs, drills.Namespace(t, cs, "drill-leader-change"))
		var from []string
		for range 2 {
			time.Sleep(3 * time.Second)
			from = append(from, moveLeader(t, cli))
		}
		time.Sleep(3 * time.Second)
		writer.Stop()
		now, err := cli.Get(ctx, "/registry/", clientv3.WithCountOnly())
		if err != nil {
			t.Fatal(err)
		}
		// Every revision since the newest verified snapshot, in order, once the chain reaches now.
		base, chain, err := chainReaching(ctx, store, now.Header.Revision, 30*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		covered := base.Revision
		for _, d := range chain {
			events, err := store.ReadDelta(ctx, d)
			if err != nil {
				t.Fatal(err)
			}
			for _, ev := range events {
				switch rev := ev.Kv.ModRevision; {
				case rev <= covered: // an earlier delta's, or another key of the same revision
				case rev == covered+1:
					covered = rev
				default:
					t.Fatalf("delta %s: revision %d follows %d", d.Name, rev, covered)
				}
			}
		}
		var streamed []string
		for _, in := range members {
			if v := agentMetric(t, in, wellknown.EtcdBackupDeltaRevisionMetric); v != "" && v != "0" {
				streamed = append(streamed, in.Name)
			}
		}
		t.Logf("leadership moved from %v; %d deltas after %s hold every revision to %d, stored by %v", from, len(chain), base.Name, covered, streamed)
		if len(streamed) < 2 {
			t.Errorf("only %v stored deltas across two leader changes: the stream did not move with the leadership", streamed)
		}
	})

	t.Run("defragmentation under a writer", func(t *testing.T) {
		if _, err := framework.Running.BackupEtcd(ctx); err != nil { // the gate wants a fresh snapshot
			t.Fatal(err)
		}
		writer := drills.StartWriter(cs, drills.Namespace(t, cs, "drill-defrag"))
		prober := drills.StartProber(cs, 10, 2*time.Second)
		time.Sleep(3 * time.Second)
		out, err := framework.Running.DefragEtcd(ctx, "--min-free=0", "--min-free-share=0") // every member, worth it or not
		time.Sleep(2 * time.Second)
		prober.Stop()
		acked := writer.Stop()
		if err != nil {
			t.Fatal(err)
		}
		ok, fail, failures := prober.Window()
		t.Logf("%d writes acknowledged, %d of %d reads answered during the pass:\n%s", len(acked), ok, ok+fail, out)
		if fail > 0 {
			t.Errorf("%d reads failed during defragmentation, the first: %v", fail, failures[0])
		}
		if ok < 50 || len(acked) == 0 {
			t.Errorf("%d reads answered, %d writes acknowledged: the pass was not under load", ok, len(acked))
		}
		if lost := writer.Lost(t, cs); len(lost) > 0 {
			t.Errorf("%d acknowledged writes lost: %v", len(lost), lost[:min(len(lost), 5)])
		}
		defragmented := strings.Count(out, " MiB in ")
		leaderLast := strings.LastIndex(out, "(follower)") < strings.Index(out, "(leader)")
		if defragmented != len(members) || !leaderLast {
			t.Errorf("defragmented %d of %d members, the leader last: %t", defragmented, len(members), leaderLast)
		}
	})

	writer := drills.StartWriter(framework.Clientset(t), ns)
	time.Sleep(10 * time.Second)

	// No snapshot on demand: the writes after the newest periodic one come back from the deltas.
	framework.StopAll(t, members, "etcd") // SIGKILL
	killed := time.Now()
	for _, in := range members {
		if err := os.RemoveAll(filepath.Join(framework.Running.Root(in.Name), machine.EtcdDataDir, "member")); err != nil {
			t.Fatal(err)
		}
	}
	acked := writer.Stop()
	snap, err := store.Find(ctx, "")
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("total loss: %d writes acknowledged, the newest snapshot %s taken %s before the kill", len(acked), snap.Name, killed.Sub(snap.Taken).Round(time.Second))

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
	var lost, afterSnapshot int
	firstLost := killed
	for name, at := range acked {
		if at.After(restored.Taken) {
			afterSnapshot++
		}
		switch {
		case present[name]:
		case at.Before(killed.Add(-time.Second)):
			t.Errorf("write %s, acknowledged %s before the kill, is lost", name, killed.Sub(at).Round(time.Millisecond))
			fallthrough
		default:
			lost++
			if at.Before(firstLost) {
				firstLost = at
			}
		}
	}
	t.Logf("restored from %s and its deltas: %d of %d acknowledged writes present (%d acknowledged after the snapshot)",
		restored.Name, len(acked)-lost, len(acked), afterSnapshot)
	if lost > 0 {
		t.Logf("%d acknowledged writes lost, the first acknowledged %s before the kill", lost, killed.Sub(firstLost).Round(time.Millisecond))
	}
	if afterSnapshot == 0 {
		t.Errorf("no write was acknowledged after the snapshot %s: the drill did not exercise the deltas", restored.Name)
	}
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

// chainReaching waits until the deltas after the newest verified snapshot reach revision rev,
// and returns that snapshot and its chain.
func chainReaching(ctx context.Context, store *etcdbackup.Store, rev int64, timeout time.Duration) (base etcdbackup.Snapshot, chain []etcdbackup.Delta, err error) {
	err = drills.WaitUntil(timeout, func() error {
		if base, err = store.Find(ctx, ""); err != nil {
			return err
		}
		deltas, err := store.Deltas(ctx)
		if err != nil {
			return err
		}
		var reached int64
		if chain, reached, err = etcdbackup.Chain(base.Revision, deltas); err != nil {
			return err
		}
		if reached < rev {
			return fmt.Errorf("the chain after %s reaches revision %d, not yet %d", base.Name, reached, rev)
		}
		return nil
	})
	return base, chain, err
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

// moveLeader hands the main etcd's leadership to another member, through the leader, and returns
// the leader's name.
func moveLeader(t *testing.T, cli *clientv3.Client) string {
	t.Helper()
	ctx := context.Background()
	members, err := cli.MemberList(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var leader, follower *etcdserverpb.Member
	for _, m := range members.Members {
		st, err := cli.Status(ctx, m.ClientURLs[0])
		if err != nil {
			t.Fatal(err)
		}
		if st.Leader == m.ID {
			leader = m
		} else {
			follower = m
		}
	}
	if leader == nil || follower == nil {
		t.Fatal("no leader and follower to move leadership between")
	}
	c, err := framework.Running.EtcdClient(spec.RoleEtcdMain, leader.Name)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, err := c.MoveLeader(ctx, follower.ID); err != nil {
		t.Fatal(err)
	}
	return leader.Name
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
