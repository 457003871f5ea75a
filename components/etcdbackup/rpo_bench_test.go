package etcdbackup

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log"
	"net/http"
	"os"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/storage/azblob/container"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/clusterforge/clusterforge/components/spec"
	"github.com/clusterforge/clusterforge/test/openloop"
	"github.com/clusterforge/clusterforge/test/toolchain"
)

// The recovery point benchmark's window of openloop.EtcdWritesPerSecond writes.
const rpoWindow = time.Minute

// rpoSizes are the databases the benchmark fills before it writes: 2 GiB, and what stays under
// the 8 GiB quota (etcd's own overhead takes the rest); 256 MiB checks the harness in minutes.
var rpoSizes = map[string]int64{"256MiB": 256 << 20, "2GiB": 2 << 30, "7GiB": 7 << 30}

// BenchmarkDeltaRPO measures, per database size, what the delta stream loses when the only
// member is killed (SIGKILL) under 1,000 writes/s: the writer records every acknowledged write,
// the member is restored from the newest verified snapshot and the deltas replayed, and the RPO
// is the time between the first acknowledged write missing and the last acknowledged at all (0 if
// none is missing). It also reports what the stream costs per 1,000 writes/s: bytes stored per
// second, and the cores the agent and etcd's watch add (the same writer's window with the agent
// stopped is the baseline). RPO_SIZES picks sizes (default all); scripts/bench-etcd-backup.sh runs it.
func BenchmarkDeltaRPO(b *testing.B) {
	etcdBin := toolchain.Binary(b, "bin/etcd")
	etcdutl := toolchain.Binary(b, "bin/etcdutl")
	for _, name := range strings.Split(envOr("RPO_SIZES", "2GiB,7GiB"), ",") {
		size, ok := rpoSizes[name]
		if !ok {
			b.Fatalf("RPO_SIZES: %q is none of 256MiB, 2GiB, 7GiB", name)
		}
		b.Run(name, func(b *testing.B) {
			for range b.N {
				rpoRun(b, etcdBin, etcdutl, size)
			}
		})
	}
}

func rpoRun(b *testing.B, etcdBin, etcdutl string, size int64) {
	ctx := context.Background()
	cli, endpoint, etcdCmd := startEtcdCmd(b, etcdBin, b.TempDir(), "bench")
	load(b, cli, dataset{parts: []keys{{"/registry/configmaps/bench/large-", int(size / (100 << 10)), 100 << 10}}})

	store, registry := azurite(b, "bench/etcd-main")
	baseline := rpoWrite(ctx, cli, etcdCmd.Process.Pid, "/registry/bench/baseline/", nil)
	// The agent's own way to the store, cut when its machine is lost: what it has not stored by
	// then is lost with it.
	lost := &cuttable{}
	opts := &container.ClientOptions{}
	opts.Transport = lost
	agentContainer, err := container.NewClientFromConnectionString(azuriteConnection, spec.BackupContainer, opts)
	if err != nil {
		b.Fatal(err)
	}
	agent := &Agent{Etcd: cli, Endpoint: endpoint, Store: NewStore(agentContainer, store.Cluster), Registry: registry, Interval: 24 * time.Hour, Retention: DefaultRetention(), Log: log.New(io.Discard, "", 0)}
	agentCtx, stopAgent := context.WithCancel(ctx)
	agentDone := make(chan struct{})
	go func() { defer close(agentDone); agent.Run(agentCtx) }()
	defer func() { stopAgent(); <-agentDone }()
	snap := waitUntil(b, 30*time.Minute, "the agent's first verified snapshot", func() (Snapshot, bool) {
		s, err := store.Find(ctx, "")
		return s, err == nil
	})
	if _, err := cli.Put(ctx, "/registry/bench/stream-started", "1"); err != nil {
		b.Fatal(err)
	}
	waitUntil(b, time.Minute, "the delta stream", func() (int64, bool) {
		agent.mu.Lock()
		defer agent.mu.Unlock()
		return agent.deltaRevision, agent.deltaRevision > 0
	})

	stored := func() int64 {
		deltas, _ := store.Deltas(ctx)
		var n int64
		for _, d := range deltas {
			n += d.Size
		}
		return n
	}
	storedBefore := stored()
	kill := func() { lost.cut.Store(true); _ = etcdCmd.Process.Signal(syscall.SIGKILL) }
	streamed := rpoWrite(ctx, cli, etcdCmd.Process.Pid, "/registry/bench/rpo/", kill)
	_ = etcdCmd.Wait()
	stopAgent()
	<-agentDone
	storedBytes := stored() - storedBefore

	began := time.Now()
	member := Member{Name: "bench", PeerURL: "http://127.0.0.1:23800", InitialCluster: "bench=http://127.0.0.1:23800", Token: "rpo", DataDir: b.TempDir()}
	if err := RestoreMember(ctx, store, snap, member, etcdutl); err != nil {
		b.Fatal(err)
	}
	restored, _, _ := startEtcdCmd(b, etcdBin, member.DataDir, member.Name)
	record, err := ReadRestoreRecord(member.DataDir)
	if err != nil {
		b.Fatal(err)
	}
	report, err := Replay(ctx, restored, store, record)
	if err != nil {
		b.Fatal(err)
	}
	restoring := time.Since(began)
	got, err := restored.Get(ctx, "/registry/bench/rpo/", clientv3.WithPrefix(), clientv3.WithKeysOnly())
	if err != nil {
		b.Fatal(err)
	}
	present := map[string]bool{}
	for _, kv := range got.Kvs {
		present[string(kv.Key)] = true
	}
	var lastAck, firstLost time.Time
	missing := 0
	for key, at := range streamed.acked {
		lastAck = later(lastAck, at)
		if !present[key] {
			missing++
			if firstLost.IsZero() || at.Before(firstLost) {
				firstLost = at
			}
		}
	}
	rpo := 0.0
	if missing > 0 {
		rpo = lastAck.Sub(firstLost).Seconds()
	}
	// Valid only if both windows carried the load they offered and the chain was whole.
	valid := 1.0
	if baseline.delivered() < openloop.DeliveredShare || streamed.delivered() < openloop.DeliveredShare || report.Stopped != nil {
		valid = 0
	}
	fmt.Fprintf(os.Stderr, "    offered %d writes/s: delivered %.0f%% (baseline window %.0f%%); %d acknowledged writes lost; %s\n",
		openloop.EtcdWritesPerSecond, 100*streamed.delivered(), 100*baseline.delivered(), missing, report)
	b.ReportMetric(rpo, "s-rpo")
	b.ReportMetric(float64(missing), "writes-lost")
	b.ReportMetric(restoring.Seconds(), "s-restore-replay")
	b.ReportMetric(float64(storedBytes)/streamed.elapsed.Seconds()/streamed.thousands()/1024, "KiB/s-stored-per-1000wps")
	b.ReportMetric(streamed.cores/streamed.thousands()-baseline.cores/baseline.thousands(), "cores-per-1000wps")
	b.ReportMetric(valid, "valid")
}

// rpoWindowResult is one window of the writer.
type rpoWindowResult struct {
	offered int
	acked   map[string]time.Time
	elapsed time.Duration
	// cores used by this process and etcd together, on average over the window.
	cores float64
}

func (r rpoWindowResult) delivered() float64 { return float64(len(r.acked)) / float64(r.offered) }

// thousands is the window's acknowledged writes per second, in thousands.
func (r rpoWindowResult) thousands() float64 {
	return float64(len(r.acked)) / r.elapsed.Seconds() / 1000
}

// cuttable reaches the store until cut, then fails every request, as a lost machine does.
type cuttable struct{ cut atomic.Bool }

func (c *cuttable) Do(req *http.Request) (*http.Response, error) {
	if c.cut.Load() {
		return nil, errors.New("machine lost (benchmark)")
	}
	return http.DefaultClient.Do(req)
}

// rpoWrite offers openloop's steady writes under prefix for rpoWindow and records when each was
// acknowledged. kill, if set, runs at the end of the window, and the writer goes on offering for
// a second after it.
func rpoWrite(ctx context.Context, cli *clientv3.Client, etcdPid int, prefix string, kill func()) rpoWindowResult {
	cpuBefore, etcdBefore := processCPU(), pidCPU(etcdPid)
	began := time.Now()
	puts := openloop.StartPuts(ctx, cli, prefix, openloop.EtcdWritesPerSecond)
	time.Sleep(rpoWindow)
	res := rpoWindowResult{offered: puts.Offered(), elapsed: time.Since(began)}
	res.cores = (processCPU() - cpuBefore + pidCPU(etcdPid) - etcdBefore) / res.elapsed.Seconds()
	if kill != nil {
		kill()
		time.Sleep(time.Second)
	}
	res.acked = puts.Stop()
	return res
}

// processCPU is this process's user and system CPU seconds so far.
func processCPU() float64 {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return float64(ru.Utime.Nano()+ru.Stime.Nano()) / 1e9
}

// pidCPU is a process's user and system CPU seconds so far (/proc/<pid>/stat, at 100 ticks a second).
func pidCPU(pid int) float64 {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0
	}
	fields := strings.Fields(string(data[strings.LastIndexByte(string(data), ')')+2:]))
	utime, _ := strconv.ParseFloat(fields[11], 64)
	stime, _ := strconv.ParseFloat(fields[12], 64)
	return (utime + stime) / 100
}

func envOr(key, fallback string) string {
	if v := os.Getenv(key); v != "" {
		return v
	}
	return fallback
}

// waitUntil polls f every 100 ms until it is done, for at most limit.
func waitUntil[T any](b testing.TB, limit time.Duration, what string, f func() (T, bool)) T {
	b.Helper()
	for deadline := time.Now().Add(limit); ; time.Sleep(100 * time.Millisecond) {
		v, done := f()
		if done {
			return v
		}
		if time.Now().After(deadline) {
			b.Fatalf("no %s within %s (last %v)", what, limit, v)
		}
	}
}
