package etcdbackup

import (
	"context"
	"crypto/rand"
	"fmt"
	"io"
	"log"
	"net/http"
	"os"
	"os/exec"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/clusterforge/clusterforge/test/toolchain"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
	"golang.org/x/sync/errgroup"
)

// dataset is what the benchmark loads into etcd before it snapshots and restores.
type dataset struct {
	name  string
	parts []keys
}

// keys are count values of size bytes under prefix.
type keys struct {
	prefix string
	count  int
	size   int
}

// Node objects in a training fleet's etcd run to about 12 KiB (images, conditions, addresses);
// the other objects (pods, leases, config maps, endpoint slices) average about 2 KiB.
var datasets = []dataset{
	{"nodes-10k-objects-100k", []keys{{"/registry/minions/node-", 10_000, 12 << 10}, {"/registry/configmaps/bench/object-", 100_000, 2 << 10}}},
	{"db-2GiB", []keys{{"/registry/configmaps/bench/large-", 21_000, 100 << 10}}},
}

// BenchmarkBackup measures, per dataset, the agent's snapshot (etcd's snapshot stream, uploaded
// in blocks to Azurite, read back and verified) and one member's restore (download, checksum,
// etcdutl snapshot restore). scripts/bench-etcd-backup.sh runs it and writes the report.
func BenchmarkBackup(b *testing.B) {
	etcdBin := toolchain.Binary(b, "bin/etcd")
	etcdutl := toolchain.Binary(b, "bin/etcdutl")
	for _, ds := range datasets {
		b.Run(ds.name, func(b *testing.B) {
			cli, endpoint, _ := startEtcd(b, etcdBin, b.TempDir(), "bench")
			loaded := load(b, cli, ds)
			store, registry := azurite(b, "bench/etcd-main")
			agent := &Agent{Etcd: cli, Endpoint: endpoint, Store: store, Registry: registry, Interval: time.Hour, Retention: DefaultRetention(), Log: log.New(io.Discard, "", 0)}
			var snapshotting, restoring time.Duration
			var size int64
			b.ResetTimer()
			for range b.N {
				began := time.Now()
				snap, err := agent.Snapshot(context.Background())
				if err != nil {
					b.Fatal(err)
				}
				snapshotting += time.Since(began)
				size = snap.Size
				began = time.Now()
				member := Member{Name: "bench", PeerURL: "http://127.0.0.1:23800", InitialCluster: "bench=http://127.0.0.1:23800", Token: "restored", DataDir: b.TempDir()}
				if err := RestoreMember(context.Background(), store, snap, member, etcdutl); err != nil {
					b.Fatal(err)
				}
				restoring += time.Since(began)
			}
			b.ReportMetric(float64(loaded)/(1<<20), "MiB-loaded")
			b.ReportMetric(float64(size)/(1<<20), "MiB-snapshot")
			b.ReportMetric(snapshotting.Seconds()/float64(b.N), "s-snapshot-upload-verify")
			b.ReportMetric(restoring.Seconds()/float64(b.N), "s-restore")
		})
	}
}

// startEtcd runs one etcd member named name on loopback, on dataDir, with the largest backend
// quota clusterforge allows, until stop is called or the test ends.
func startEtcd(b testing.TB, bin, dataDir, name string) (cli *clientv3.Client, endpoint string, stop func()) {
	cli, endpoint, cmd := startEtcdCmd(b, bin, dataDir, name)
	var once sync.Once
	stop = func() { once.Do(func() { _ = cmd.Process.Signal(syscall.SIGTERM); _ = cmd.Wait() }) }
	b.Cleanup(stop)
	return cli, endpoint, stop
}

// startEtcdCmd is startEtcd with the process itself; the test ends it.
func startEtcdCmd(b testing.TB, bin, dataDir, name string) (cli *clientv3.Client, endpoint string, cmd *exec.Cmd) {
	endpoint = "http://127.0.0.1:23790"
	cmd = exec.Command(bin, "--name="+name, "--data-dir="+dataDir,
		"--listen-client-urls="+endpoint, "--advertise-client-urls="+endpoint,
		"--listen-peer-urls=http://127.0.0.1:23800", "--initial-advertise-peer-urls=http://127.0.0.1:23800",
		"--initial-cluster="+name+"=http://127.0.0.1:23800", "--quota-backend-bytes=8589934592", "--log-level=warn")
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(100 * time.Millisecond) {
		if resp, err := http.Get(endpoint + "/health"); err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				break
			}
		}
		if time.Now().After(deadline) {
			b.Fatal("etcd did not become healthy")
		}
	}
	cli, err := clientv3.New(clientv3.Config{Endpoints: []string{endpoint}, Logger: zap.NewNop(), MaxCallSendMsgSize: 2 << 20})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { cli.Close() })
	return cli, endpoint, cmd
}

// load writes the dataset with 16 writers and returns the bytes written, printing progress.
func load(b *testing.B, cli *clientv3.Client, ds dataset) int64 {
	var total int64
	began := time.Now()
	for _, part := range ds.parts {
		value := make([]byte, part.size)
		_, _ = rand.Read(value)
		var g errgroup.Group
		g.SetLimit(16)
		for i := range part.count {
			g.Go(func() error {
				_, err := cli.Put(context.Background(), fmt.Sprintf("%s%06d", part.prefix, i), string(value))
				return err
			})
		}
		if err := g.Wait(); err != nil {
			b.Fatal(err)
		}
		total += int64(part.count) * int64(part.size)
		fmt.Fprintf(os.Stderr, "    loaded %d x %d KiB under %s (%s)\n", part.count, part.size>>10, part.prefix, time.Since(began).Round(time.Second))
	}
	return total
}
