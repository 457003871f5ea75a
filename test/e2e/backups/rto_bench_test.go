package backups_test

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/serializer/protobuf"
	"k8s.io/apimachinery/pkg/util/uuid"
	"k8s.io/client-go/kubernetes/scheme"

	"github.com/clusterforge/clusterforge/components/machine"
	"github.com/clusterforge/clusterforge/components/spec"
	"github.com/clusterforge/clusterforge/components/wellknown"
	"github.com/clusterforge/clusterforge/test/drills"
	"github.com/clusterforge/clusterforge/test/e2e/framework"
	"github.com/clusterforge/clusterforge/test/openloop"
)

// The recovery time benchmark's database: ConfigMaps of a Node's size, stored as the apiserver
// stores them, so that every apiserver reads them all into its watch cache before it serves them.
const (
	rtoFillNamespace   = "bench-rto-fill"
	rtoFillObjectBytes = 12 << 10
	rtoFillPerTxn      = 64
	// The writes go where no apiserver watches: the replay carries them, the caches do not.
	rtoWritePrefix = "/registry/clusterforge-bench/rto/"
	// A run needs this long to write between its snapshot and the next periodic one.
	rtoLeastWindow = time.Minute
	// The capacity topology's one main member, capped at half a core, delivered 92 % of 500
	// writes a second while its snapshot ran; a run offers what it carries, so that it counts.
	rtoWritesPerSecond = openloop.EtcdWritesPerSecond * 2 / 5
)

var rtoSizes = map[string]int64{"256MiB": 256 << 20, "2GiB": 2 << 30}

// BenchmarkTotalLossRTO measures a total loss's recovery time on the package's rehearsal: the
// main etcd filled to RTO_SIZE (default 2GiB) with ConfigMaps the apiservers cache, a snapshot,
// then 400 writes/s until just before the next periodic snapshot (the most deltas a restore
// replays at that rate), and every member and its backup agent killed (SIGKILL) and its data dir
// wiped at once. It times the restore (`make etcd-restore`: the newest verified snapshot and every
// delta after it) until every apiserver, controller-manager and scheduler is ready and every
// apiserver serves the ConfigMaps from its watch cache, with each step's share. Every write
// acknowledged more than a second before the kill must be back. scripts/bench-etcd-backup.sh runs
// it on prod-10k's capacity topology (-topology capacity: one machine of each role, each capped at
// its cores, as Azure restores each member on a machine of its own); on the dev shape's five
// members sharing two cores a 2 GiB snapshot outlasts the backup interval. Needs root.
func BenchmarkTotalLossRTO(b *testing.B) {
	framework.NeedRehearsal(b)
	name := os.Getenv("RTO_SIZE")
	if name == "" {
		name = "2GiB"
	}
	size, ok := rtoSizes[name]
	if !ok {
		b.Fatalf("RTO_SIZE: %q is neither 256MiB nor 2GiB", name)
	}
	b.Run(name, func(b *testing.B) {
		for range b.N {
			rtoRun(b, size)
		}
	})
}

func rtoRun(b *testing.B, size int64) {
	ctx := context.Background()
	cli, err := framework.Running.EtcdClient(spec.RoleEtcdMain)
	if err != nil {
		b.Fatal(err)
	}
	defer cli.Close()
	fillTo(b, cli, size)
	// An earlier run's writes would make this run's database larger than the last one's.
	if _, err := cli.Delete(ctx, rtoWritePrefix, clientv3.WithPrefix()); err != nil {
		b.Fatal(err)
	}
	store, err := framework.Running.BackupStore()
	if err != nil {
		b.Fatal(err)
	}
	interval, err := time.ParseDuration(framework.Running.Cluster.Backup.Interval)
	if err != nil {
		b.Fatal(err)
	}
	// The stream caught up with the fill first, so that the snapshot's window is spent writing.
	now, err := cli.Get(ctx, "/registry/", clientv3.WithCountOnly())
	if err != nil {
		b.Fatal(err)
	}
	if _, _, err := chainReaching(ctx, store, now.Header.Revision, 10*time.Minute); err != nil {
		b.Fatalf("the delta stream did not catch up with the fill: %v", err)
	}
	snap, err := framework.Running.BackupEtcd(ctx)
	if err != nil {
		b.Fatal(err)
	}
	window := time.Until(snap.Taken.Add(interval)) - 15*time.Second
	if window < rtoLeastWindow {
		b.Fatalf("snapshot %s took until %s before the next periodic one: no time left to write", snap.Name, window+15*time.Second)
	}
	fmt.Fprintf(os.Stderr, "    snapshot %s (%d MiB); writing %d/s for %s, then every member is lost\n",
		snap.Name, snap.Size>>20, rtoWritesPerSecond, window.Round(time.Second))
	prefix := fmt.Sprintf("%s%d/", rtoWritePrefix, time.Now().UnixNano())
	puts := openloop.StartPuts(ctx, cli, prefix, rtoWritesPerSecond)
	time.Sleep(window)
	delivered := float64(puts.Acked()) / float64(puts.Offered())
	members := framework.Running.Of(spec.RoleEtcdMain)
	killed := time.Now()
	framework.StopAll(b, members, "etcd") // SIGKILL, and the agents with them: a lost machine
	framework.StopAll(b, members, machine.EtcdBackupUnit)
	for _, in := range members {
		if err := os.RemoveAll(filepath.Join(framework.Running.Root(in.Name), machine.EtcdDataDir, "member")); err != nil {
			b.Fatal(err)
		}
	}
	time.Sleep(time.Second) // writes flow into the loss
	acked := puts.Stop()

	began := time.Now()
	restored, err := framework.Running.RestoreEtcd(ctx, "") // make etcd-restore
	if err != nil {
		b.Fatal(err)
	}
	restoredAt := time.Now()
	after, err := framework.Running.EtcdClient(spec.RoleEtcdMain)
	if err != nil {
		b.Fatal(err)
	}
	defer after.Close()
	cachesReady(b, after)
	rto := time.Since(began)

	got, err := after.Get(ctx, prefix, clientv3.WithPrefix(), clientv3.WithKeysOnly())
	if err != nil {
		b.Fatal(err)
	}
	present := map[string]bool{}
	for _, kv := range got.Kvs {
		present[string(kv.Key)] = true
	}
	lost := 0
	for key, at := range acked {
		if present[key] {
			continue
		}
		lost++
		if at.Before(killed.Add(-time.Second)) {
			b.Errorf("write %s, acknowledged %s before the kill, is lost", key, killed.Sub(at).Round(time.Millisecond))
		}
	}
	dbSize := largestDB(b, after)
	valid := 1.0
	if delivered < openloop.DeliveredShare || dbSize < size*95/100 || restored.Name != snap.Name {
		valid = 0
	}
	stopping := restoredAt.Sub(began) - restored.Rebuild - restored.Start - restored.Replay - restored.APIServers
	caches := rto - restoredAt.Sub(began)
	fmt.Fprintf(os.Stderr, "    restored from %s in %s: stopping %s, members rebuilt %s, started %s, replayed %s, apiservers ready %s, caches %s; "+
		"%d MiB; %d of %d acknowledged writes back, %.0f%% of the offered writes delivered\n",
		restored.Name, rto.Round(time.Second), stopping.Round(time.Second), restored.Rebuild.Round(time.Second), restored.Start.Round(time.Second),
		restored.Replay.Round(time.Second), restored.APIServers.Round(time.Second), caches.Round(time.Second),
		dbSize>>20, len(acked)-lost, len(acked), 100*delivered)
	b.ReportMetric(rto.Seconds(), "s-rto")
	b.ReportMetric(stopping.Seconds(), "s-stopping")
	b.ReportMetric(restored.Rebuild.Seconds(), "s-rebuild")
	b.ReportMetric(restored.Start.Seconds(), "s-start")
	b.ReportMetric(restored.Replay.Seconds(), "s-replay")
	b.ReportMetric(restored.APIServers.Seconds(), "s-apiservers")
	b.ReportMetric(caches.Seconds(), "s-caches")
	b.ReportMetric(window.Seconds(), "s-writing")
	b.ReportMetric(float64(len(present)), "writes-replayed")
	b.ReportMetric(float64(dbSize>>20), "MiB-db")
	b.ReportMetric(valid, "valid")
}

// cachesReady waits until every apiserver serves ConfigMaps from its watch cache: /readyz does
// not wait for the caches, and until one is filled a watch is refused with 429.
func cachesReady(b *testing.B, cli *clientv3.Client) {
	ctx := context.Background()
	now, err := cli.Get(ctx, "/registry/", clientv3.WithCountOnly())
	if err != nil {
		b.Fatal(err)
	}
	for _, in := range framework.Running.Of(spec.RoleAPIServer) {
		url := fmt.Sprintf("https://%s:%d/api/v1/namespaces/%s/configmaps?watch=1&timeoutSeconds=1&resourceVersion=%d",
			in.IP, wellknown.APIServerPort, rtoFillNamespace, now.Header.Revision)
		err := drills.WaitUntil(10*time.Minute, func() error {
			code, body, err := framework.Running.Get(ctx, url)
			if err == nil && code != http.StatusOK {
				err = fmt.Errorf("%s: HTTP %d: %.200s", in.Name, code, body)
			}
			return err
		})
		if err != nil {
			b.Fatalf("%s never served ConfigMaps from its cache: %v", in.Name, err)
		}
	}
}

// fillTo stores ConfigMaps in the main etcd, encoded as the apiserver stores them, until its
// largest member's database holds size bytes; a rehearsal filled by an earlier run is left as it is.
func fillTo(b *testing.B, cli *clientv3.Client, size int64) {
	ctx := context.Background()
	if largestDB(b, cli) >= size {
		return
	}
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: rtoFillNamespace}}
	if _, err := framework.Clientset(b).CoreV1().Namespaces().Create(ctx, ns, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		b.Fatal(err)
	}
	codec := scheme.Codecs.EncoderForVersion(protobuf.NewSerializer(scheme.Scheme, scheme.Scheme), corev1.SchemeGroupVersion)
	payload := strings.Repeat("f", rtoFillObjectBytes)
	began, reported := time.Now(), time.Now()
	for txn := 0; ; txn++ {
		if txn%16 == 0 {
			db := largestDB(b, cli)
			if db >= size {
				fmt.Fprintf(os.Stderr, "    filled to %d MiB in %s\n", db>>20, time.Since(began).Round(time.Second))
				return
			}
			if time.Since(reported) > 15*time.Second {
				fmt.Fprintf(os.Stderr, "    filling: %d of %d MiB\n", db>>20, size>>20)
				reported = time.Now()
			}
		}
		var ops []clientv3.Op
		for i := range rtoFillPerTxn {
			cm := &corev1.ConfigMap{
				ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("fill-%d-%d-%d", began.UnixNano(), txn, i), Namespace: rtoFillNamespace, UID: uuid.NewUUID(), CreationTimestamp: metav1.Now()},
				Data:       map[string]string{"payload": payload},
			}
			value, err := runtime.Encode(codec, cm)
			if err != nil {
				b.Fatal(err)
			}
			ops = append(ops, clientv3.OpPut("/registry/configmaps/"+rtoFillNamespace+"/"+cm.Name, string(value)))
		}
		// A busy member times out now and then (a snapshot of the growing database competes with
		// the fill); writing the same objects again is harmless.
		err := drills.WaitUntil(time.Minute, func() error { _, err := cli.Txn(ctx).Then(ops...).Commit(); return err })
		if err != nil {
			b.Fatal(err)
		}
	}
}

// largestDB is the largest database size among the main etcd's members.
func largestDB(b *testing.B, cli *clientv3.Client) int64 {
	var largest int64
	for _, ep := range cli.Endpoints() {
		st, err := cli.Status(context.Background(), ep)
		if err != nil {
			b.Fatal(err)
		}
		largest = max(largest, st.DbSize)
	}
	return largest
}
