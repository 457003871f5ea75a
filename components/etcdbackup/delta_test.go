package etcdbackup

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/storage/azblob/container"
	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/clusterforge/clusterforge/components/spec"
	"github.com/clusterforge/clusterforge/test/toolchain"
)

// The agent streams every change of a real etcd into deltas after its snapshot; a member restored
// from the snapshot by the real etcdutl and replayed serves exactly what the original served at
// the end (keys put, overwritten, deleted, in transactions and with a lease), past a revision
// the original never handed out.
func TestRealEtcdDeltasReplayEveryChangeAfterTheSnapshot(t *testing.T) {
	ctx := context.Background()
	etcdBin := toolchain.Binary(t, "bin/etcd")
	etcdutl := toolchain.Binary(t, "bin/etcdutl")
	cli, endpoint, stop := startEtcd(t, etcdBin, t.TempDir(), "original")
	store, registry := azurite(t, "cf-test/etcd-main")
	var logs strings.Builder
	agent := &Agent{Etcd: cli, Endpoint: endpoint, Store: store, Registry: registry, Interval: time.Hour, Retention: DefaultRetention(), Log: log.New(&logs, "", 0)}
	for i := range 50 {
		put(t, cli, fmt.Sprintf("/registry/configmaps/before/%d", i), "v1")
	}
	put(t, cli, "/registry/masterleases/10.0.0.4", "expires")
	runCtx, stopAgent := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() { defer close(done); agent.Run(runCtx) }()
	snap := waitFor(t, "a verified snapshot", func() (Snapshot, bool) {
		s, err := store.Find(ctx, "")
		return s, err == nil
	})

	lease, err := cli.Grant(ctx, 600)
	if err != nil {
		t.Fatal(err)
	}
	for i := range 300 {
		if i%100 == 99 {
			time.Sleep(2 * DeltaFlushEvery) // the changes span several deltas
		}
		put(t, cli, fmt.Sprintf("/registry/configmaps/after/%d", i), fmt.Sprintf("v%d", i))
		switch i % 10 {
		case 3:
			put(t, cli, fmt.Sprintf("/registry/configmaps/before/%d", i/10), "overwritten")
		case 5:
			if _, err := cli.Delete(ctx, fmt.Sprintf("/registry/configmaps/after/%d", i-1)); err != nil {
				t.Fatal(err)
			}
		case 7:
			if _, err := cli.Txn(ctx).Then(clientv3.OpPut(fmt.Sprintf("/registry/txn/%d/a", i), "a"), clientv3.OpPut(fmt.Sprintf("/registry/txn/%d/b", i), "b"),
				clientv3.OpDelete("/registry/configmaps/before/", clientv3.WithPrefix())).Commit(); err != nil {
				t.Fatal(err)
			}
		case 9:
			if _, err := cli.Put(ctx, fmt.Sprintf("/registry/masterleases/%d", i), "lease", clientv3.WithLease(lease.ID)); err != nil {
				t.Fatal(err)
			}
		}
	}
	if _, err := cli.Delete(ctx, "/registry/masterleases/10.0.0.4"); err != nil { // its lease expired
		t.Fatal(err)
	}
	last, err := cli.Get(ctx, "/registry/", clientv3.WithPrefix())
	if err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the deltas to reach the last write", func() (int64, bool) {
		deltas, err := store.Deltas(ctx)
		_, reached, broken := Chain(snap.Revision, deltas)
		return reached, err == nil && broken == nil && reached == last.Header.Revision
	})
	stopAgent()
	<-done
	stop()

	member := Member{Name: "restored", PeerURL: "http://127.0.0.1:23800", InitialCluster: "restored=http://127.0.0.1:23800", Token: "restored-1", DataDir: t.TempDir()}
	if err := RestoreMember(ctx, store, snap, member, etcdutl); err != nil {
		t.Fatal(err)
	}
	restored, _, _ := startEtcd(t, etcdBin, member.DataDir, member.Name)
	record, err := ReadRestoreRecord(member.DataDir)
	if err != nil || record.Snapshot != snap.Name || record.Revision < snap.Revision {
		t.Fatalf("restore record %+v (%v), want snapshot %s at revision %d or later", record, err, snap.Name, snap.Revision)
	}
	// The restored member's agent, due a snapshot every second, takes none before the replay: it
	// would become the newest restorable point and hide the deltas.
	paused := &Agent{Etcd: restored, Endpoint: endpoint, Store: store, Registry: registry, Interval: time.Second, Retention: DefaultRetention(), DataDir: member.DataDir, Log: log.New(io.Discard, "", 0)}
	pausedCtx, stopPaused := context.WithCancel(ctx)
	defer stopPaused()
	go paused.Run(pausedCtx)
	time.Sleep(3 * time.Second)
	if newest, err := store.Find(ctx, ""); err != nil || newest.Name != snap.Name {
		t.Fatalf("before the replay the newest verified snapshot is %s (%v), want %s: the restored member's agent did not wait", newest.Name, err, snap.Name)
	}
	// The restored cluster's master lease expires before the replay: that write alone is allowed.
	if _, err := restored.Delete(ctx, "/registry/masterleases/10.0.0.4"); err != nil {
		t.Fatal(err)
	}
	// A delta that cannot be downloaded interrupts the replay; run again, it resumes.
	deltas, err := store.Deltas(ctx)
	if err != nil || len(deltas) < 3 {
		t.Fatalf("%d deltas (%v), want 3 or more", len(deltas), err)
	}
	flaky := unreachable(t, store, deltas[len(deltas)-2].Name)
	if _, err := Replay(ctx, restored, flaky, record); err == nil || !strings.Contains(err.Error(), "run replay again") {
		t.Fatalf("a replay with a delta out of reach answered %v, want an error asking to run it again", err)
	}
	if newest, err := store.Find(ctx, ""); err != nil || newest.Name != snap.Name {
		t.Fatalf("after an interrupted replay the newest verified snapshot is %s (%v), want %s", newest.Name, err, snap.Name)
	}
	// Seen from an older restore, the cluster has been written to since: refused untouched.
	if _, err := Replay(ctx, restored, store, RestoreRecord{Snapshot: "older", Revision: record.Revision - 5}); err == nil || !strings.Contains(err.Error(), "written to since") {
		t.Fatalf("a replay into a cluster written to since its restore answered %v, want a refusal", err)
	}
	report, err := Replay(ctx, restored, store, record)
	if err != nil || report.Stopped != nil {
		t.Fatalf("replay: %v, %v", err, report)
	}
	if report.Deltas < 3 {
		t.Errorf("replayed %d deltas, want at least 3", report.Deltas)
	}
	if report.Reached != last.Header.Revision {
		t.Errorf("replay reached revision %d, want %d, the original's last", report.Reached, last.Header.Revision)
	}
	waitFor(t, "the agent to snapshot the replayed cluster", func() (string, bool) {
		newest, err := store.Find(ctx, "")
		return newest.Name, err == nil && newest.Name != snap.Name
	})
	stopPaused()
	if _, err := Replay(ctx, restored, store, record); err == nil || !strings.Contains(err.Error(), "replayed into this cluster already") {
		t.Errorf("a second replay answered %v, want a refusal", err)
	}
	got, err := restored.Get(ctx, "/registry/", clientv3.WithPrefix())
	if err != nil {
		t.Fatal(err)
	}
	if diff := sameKeys(last, got); diff != "" {
		t.Errorf("the restored member differs from the original: %s", diff)
	}
	if got.Header.Revision <= last.Header.Revision {
		t.Errorf("the restored member is at revision %d, not past the original's %d: resource versions would be handed out twice", got.Header.Revision, last.Header.Revision)
	}
	t.Logf("%s; snapshot at revision %d", report, snap.Revision)
}

// unreachable is s with every download of the delta named failing, as a network fault would.
func unreachable(t *testing.T, s *Store, delta string) *Store {
	t.Helper()
	opts := &container.ClientOptions{}
	opts.Retry.MaxRetries = -1
	opts.Transport = failing{path: s.deltaPath(delta)}
	c, err := container.NewClientFromConnectionString(azuriteConnection, spec.BackupContainer, opts)
	if err != nil {
		t.Fatal(err)
	}
	return NewStore(c, s.Cluster)
}

type failing struct{ path string }

func (f failing) Do(req *http.Request) (*http.Response, error) {
	if req.Method == http.MethodGet && strings.HasSuffix(req.URL.Path, f.path) {
		return nil, errors.New("connection reset by peer (test)")
	}
	return http.DefaultClient.Do(req)
}

// sameKeys compares two reads of every key: keys and values, and whether each has a lease.
func sameKeys(want, got *clientv3.GetResponse) string {
	index := map[string]string{}
	for _, kv := range got.Kvs {
		index[string(kv.Key)] = fmt.Sprintf("%s lease=%t", kv.Value, kv.Lease != 0)
	}
	var diff []string
	for _, kv := range want.Kvs {
		w := fmt.Sprintf("%s lease=%t", kv.Value, kv.Lease != 0)
		if g, ok := index[string(kv.Key)]; !ok {
			diff = append(diff, fmt.Sprintf("%s missing", kv.Key))
		} else if g != w {
			diff = append(diff, fmt.Sprintf("%s is %q, want %q", kv.Key, g, w))
		}
		delete(index, string(kv.Key))
	}
	for k := range index {
		diff = append(diff, k+" should not exist")
	}
	if len(diff) > 5 {
		diff = append(diff[:5], fmt.Sprintf("and %d more", len(diff)-5))
	}
	return strings.Join(diff, "; ")
}

// Two agents around a leader change store overlapping deltas; the replay applies each change
// once, in order: the restored member's history after the restore is the original's, change for
// change, with no repeat and no gap.
func TestRealEtcdReplayAppliesOverlappingDeltasOnce(t *testing.T) {
	ctx := context.Background()
	etcdBin := toolchain.Binary(t, "bin/etcd")
	etcdutl := toolchain.Binary(t, "bin/etcdutl")
	cli, endpoint, stop := startEtcd(t, etcdBin, t.TempDir(), "original")
	store, registry := azurite(t, "cf-test/etcd-main")
	agent := &Agent{Etcd: cli, Endpoint: endpoint, Store: store, Registry: registry, Interval: time.Hour, Retention: DefaultRetention(), Log: log.New(io.Discard, "", 0)}
	put(t, cli, "/registry/configmaps/base", "v0")
	snap, err := agent.Snapshot(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for i := range 20 {
		put(t, cli, fmt.Sprintf("/registry/configmaps/k%d", i%4), fmt.Sprintf("v%d", i))
		if i%5 == 4 {
			if _, err := cli.Txn(ctx).Then(clientv3.OpPut(fmt.Sprintf("/registry/txn/%d", i), "a"), clientv3.OpDelete(fmt.Sprintf("/registry/configmaps/k%d", i%4))).Commit(); err != nil {
				t.Fatal(err)
			}
		}
	}
	original := history(t, cli, snap.Revision+1)
	last := original[len(original)-1].Kv.ModRevision
	// The old leader's agent stored up to the middle; the new one resumed a little before it.
	middle := original[len(original)/2].Kv.ModRevision
	resumed := middle - 3
	for _, span := range [][2]int64{{snap.Revision + 1, middle}, {resumed, last}} {
		var events []*mvccpb.Event
		for _, ev := range original {
			if r := ev.Kv.ModRevision; r >= span[0] && r <= span[1] {
				events = append(events, ev)
			}
		}
		if _, err := store.PutDelta(ctx, span[0], span[1], events, time.Now()); err != nil {
			t.Fatal(err)
		}
	}
	stop()

	member := Member{Name: "restored", PeerURL: "http://127.0.0.1:23800", InitialCluster: "restored=http://127.0.0.1:23800", Token: "restored-1", DataDir: t.TempDir()}
	if err := RestoreMember(ctx, store, snap, member, etcdutl); err != nil {
		t.Fatal(err)
	}
	record, err := ReadRestoreRecord(member.DataDir)
	if err != nil {
		t.Fatal(err)
	}
	restored, _, _ := startEtcd(t, etcdBin, member.DataDir, member.Name)
	before, err := restored.Get(ctx, "/", clientv3.WithCountOnly())
	if err != nil {
		t.Fatal(err)
	}
	report, err := Replay(ctx, restored, store, record)
	if err != nil || report.Stopped != nil || report.Reached != last {
		t.Fatalf("replay: %v, %v; want it to reach revision %d", err, report, last)
	}
	var replayed []string
	for _, ev := range history(t, restored, before.Header.Revision+1) {
		if !strings.HasPrefix(string(ev.Kv.Key), replayedPrefix) {
			replayed = append(replayed, change(ev))
		}
	}
	var want []string
	for _, ev := range original {
		want = append(want, change(ev))
	}
	if strings.Join(replayed, "\n") != strings.Join(want, "\n") {
		t.Errorf("the replay applied %d changes, the original made %d:\n got %v\nwant %v", len(replayed), len(want), replayed, want)
	}
}

// history is every change of cli's cluster from revision from to its current one, in order.
func history(t *testing.T, cli *clientv3.Client, from int64) []*mvccpb.Event {
	t.Helper()
	now, err := cli.Get(context.Background(), "/", clientv3.WithCountOnly())
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var out []*mvccpb.Event
	for resp := range cli.Watch(ctx, "", clientv3.WithPrefix(), clientv3.WithRev(from)) {
		if err := resp.Err(); err != nil {
			t.Fatal(err)
		}
		for _, ev := range resp.Events {
			out = append(out, (*mvccpb.Event)(ev))
		}
		if len(out) > 0 && out[len(out)-1].Kv.ModRevision >= now.Header.Revision {
			return out
		}
	}
	t.Fatalf("the history from revision %d did not reach %d: %v", from, now.Header.Revision, ctx.Err())
	return nil
}

// change is an event as a replay must repeat it: its type, key and value.
func change(ev *mvccpb.Event) string {
	return fmt.Sprintf("%s %s=%s", ev.Type, ev.Kv.Key, ev.Kv.Value)
}

// A delta missing from the middle of the chain is found by the leader's agent, counted and
// followed at once by a snapshot. A replay into the live cluster is refused.
func TestRealEtcdAMissingDeltaIsFoundAndASnapshotTaken(t *testing.T) {
	ctx := context.Background()
	cli, endpoint, _ := startEtcd(t, toolchain.Binary(t, "bin/etcd"), t.TempDir(), "original")
	store, registry := azurite(t, "cf-test/etcd-main")
	agent := &Agent{Etcd: cli, Endpoint: endpoint, Store: store, Registry: registry, Interval: time.Hour, Retention: DefaultRetention(), Log: log.New(io.Discard, "", 0)}
	runCtx, stopAgent := context.WithCancel(ctx)
	defer stopAgent()
	go agent.Run(runCtx)
	snap := waitFor(t, "a verified snapshot", func() (Snapshot, bool) {
		s, err := store.Find(ctx, "")
		return s, err == nil
	})
	deltas := waitFor(t, "three deltas", func() ([]Delta, bool) {
		put(t, cli, "/registry/configmaps/x", time.Now().String())
		time.Sleep(DeltaFlushEvery)
		d, err := store.Deltas(ctx)
		return d, err == nil && len(d) >= 3
	})
	if err := store.DeleteDelta(ctx, deltas[1].Name); err != nil {
		t.Fatal(err)
	}
	if _, err := Replay(ctx, cli, store, RestoreRecord{Snapshot: snap.Name, Revision: snap.Revision}); err == nil || !strings.Contains(err.Error(), "where the restore from") {
		t.Errorf("a replay into the live cluster answered %v, want a refusal", err)
	}
	after := waitFor(t, "a snapshot after the break", func() (Snapshot, bool) {
		s, err := store.Find(ctx, "")
		return s, err == nil && s.Name != snap.Name
	})
	if after.Revision < deltas[1].To {
		t.Errorf("the snapshot after the break is at revision %d, before the missing delta's end %d", after.Revision, deltas[1].To)
	}
	agent.mu.Lock()
	breaks := agent.chainBreaks
	agent.mu.Unlock()
	if breaks != 1 {
		t.Errorf("%d chain breaks counted, want 1", breaks)
	}
}

func put(t *testing.T, cli *clientv3.Client, key, value string) {
	t.Helper()
	if _, err := cli.Put(context.Background(), key, value); err != nil {
		t.Fatal(err)
	}
}

// waitFor polls f until it is done, for at most a minute.
func waitFor[T any](t *testing.T, what string, f func() (T, bool)) T {
	t.Helper()
	return waitUntil(t, time.Minute, what, f)
}

// Chain takes each delta that goes past what is covered, skips those that do not (two agents
// around a leader change) and stops at a gap or an object not ours.
func TestChain(t *testing.T) {
	d := func(from, to int64) Delta { return Delta{Name: deltaNameOf(from, to), From: from, To: to, SHA256: "x"} }
	for _, tc := range []struct {
		name    string
		deltas  []Delta
		chain   int
		reached int64
		broken  bool
	}{
		{"none", nil, 0, 100, false},
		{"from before the base", []Delta{d(90, 120), d(121, 130)}, 2, 130, false},
		{"wholly before the base", []Delta{d(10, 100), d(101, 110)}, 1, 110, false},
		{"two writers overlap", []Delta{d(101, 120), d(101, 115), d(116, 140), d(121, 150)}, 3, 150, false},
		{"a gap", []Delta{d(101, 120), d(122, 130)}, 1, 120, true},
		{"a gap at the base", []Delta{d(105, 120)}, 0, 100, true},
		{"not ours", []Delta{d(101, 120), {Name: deltaNameOf(121, 130), From: 121, To: 130}, d(131, 140)}, 1, 120, true},
		{"beyond int64", []Delta{d(101, 120), parseDelta("99999999999999999999-99999999999999999999", func(string) string { return "x" })}, 1, 120, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			chain, reached, err := Chain(100, tc.deltas)
			if len(chain) != tc.chain || reached != tc.reached || (err != nil) != tc.broken || (err != nil && !errors.Is(err, ErrChainBroken)) {
				t.Errorf("chain of %d reaching %d (%v), want %d reaching %d, broken %t", len(chain), reached, err, tc.chain, tc.reached, tc.broken)
			}
		})
	}
}
