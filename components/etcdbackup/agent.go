package etcdbackup

import (
	"context"
	"fmt"
	"log"
	"net/http"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/clusterforge/clusterforge/components/wellknown"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// Agent runs on every member of one etcd cluster; only the member that leads raft writes, so a
// cluster produces one snapshot per interval whichever members are up.
type Agent struct {
	// Etcd reaches this member only (its own client URL).
	Etcd *clientv3.Client
	// Endpoint is this member's client URL.
	Endpoint string
	Store    *Store
	// Interval is the age at which the newest stored snapshot is replaced: the RPO's main term.
	Interval  time.Duration
	Retention Retention
	// StatusFile is where this member's join step reports a refused bootstrap (see MayBootstrap).
	StatusFile string
	Log        *log.Logger

	mu          sync.Mutex
	leader      bool
	marked      bool
	lastSuccess time.Time
	lastSize    int64
	lastSeconds float64
	failures    int
}

// CheckEvery is how often the agent asks whether it leads and whether a snapshot is due.
func (a *Agent) CheckEvery() time.Duration { return min(a.Interval/10, 30*time.Second) }

// Run checks every CheckEvery until ctx ends. Failures are counted and logged, never fatal: the
// alert on the snapshot's age reports a persistent one.
func (a *Agent) Run(ctx context.Context) {
	for {
		if err := a.Tick(ctx); err != nil && ctx.Err() == nil {
			a.Log.Printf("backup failed: %v", err)
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(a.CheckEvery()):
		}
	}
}

// Tick takes a snapshot if this member leads and the newest stored one is at least Interval old.
func (a *Agent) Tick(ctx context.Context) error {
	status, err := a.Etcd.Status(ctx, a.Endpoint)
	if err != nil {
		a.setLeader(false)
		return nil // a member that does not answer does not lead; its peers carry on
	}
	leads := status.Leader == status.Header.MemberId
	a.setLeader(leads)
	if !leads {
		return nil
	}
	if !a.marked {
		if err := a.Store.EnsureBorn(ctx, clusterIDString(status.Header.ClusterId)); err != nil {
			return a.fail(err)
		}
		a.marked = true
	}
	snaps, err := a.Store.List(ctx)
	if err != nil {
		return a.fail(err)
	}
	if len(snaps) > 0 && time.Since(snaps[len(snaps)-1].Taken) < a.Interval {
		return nil
	}
	_, err = a.Snapshot(ctx)
	return err
}

// Snapshot takes a snapshot now, uploads it, reads it back to verify it, and prunes by
// retention: the same path for the interval and for `make etcd-backup`.
func (a *Agent) Snapshot(ctx context.Context) (Snapshot, error) {
	began := time.Now()
	status, err := a.Etcd.Status(ctx, a.Endpoint)
	if err != nil {
		return Snapshot{}, a.fail(fmt.Errorf("etcd status of %s: %w", a.Endpoint, err))
	}
	stream, err := a.Etcd.Snapshot(ctx)
	if err != nil {
		return Snapshot{}, a.fail(fmt.Errorf("etcd snapshot from %s: %w", a.Endpoint, err))
	}
	defer stream.Close()
	snap, err := a.Store.Upload(ctx, stream, began, clusterIDString(status.Header.ClusterId), status.Header.Revision)
	if err != nil {
		return Snapshot{}, a.fail(err)
	}
	if snap, err = a.Store.Verify(ctx, snap); err != nil {
		return Snapshot{}, a.fail(err)
	}
	a.mu.Lock()
	a.lastSuccess, a.lastSize, a.lastSeconds = time.Now(), snap.Size, time.Since(began).Seconds()
	a.mu.Unlock()
	a.Log.Printf("snapshot %s: revision %d, %d bytes, sha256 %s, uploaded and verified in %s",
		snap.Name, snap.Revision, snap.Size, snap.SHA256, time.Since(began).Round(time.Millisecond))
	if err := a.prune(ctx); err != nil {
		a.Log.Printf("retention: %v", err) // the snapshot itself is safe; pruning retries next time
	}
	return snap, nil
}

func (a *Agent) prune(ctx context.Context) error {
	snaps, err := a.Store.List(ctx)
	if err != nil {
		return err
	}
	for _, old := range a.Retention.Expired(snaps, time.Now()) {
		if err := a.Store.Delete(ctx, old.Name); err != nil {
			return err
		}
	}
	return nil
}

func (a *Agent) fail(err error) error {
	a.mu.Lock()
	a.failures++
	a.mu.Unlock()
	return err
}

func (a *Agent) setLeader(v bool) {
	a.mu.Lock()
	a.leader = v
	a.mu.Unlock()
}

func clusterIDString(id uint64) string { return fmt.Sprintf("%016x", id) }

// ServeHTTP writes the agent's metrics in Prometheus' text format.
func (a *Agent) ServeHTTP(w http.ResponseWriter, _ *http.Request) {
	a.mu.Lock()
	defer a.mu.Unlock()
	restoreNeeded := 0
	if status, err := os.ReadFile(a.StatusFile); err == nil && strings.HasPrefix(string(status), RestoreNeeded) {
		restoreNeeded = 1
	}
	lastSuccess := 0.0
	if !a.lastSuccess.IsZero() {
		lastSuccess = float64(a.lastSuccess.UnixMilli()) / 1000
	}
	leader := 0
	if a.leader {
		leader = 1
	}
	w.Header().Set("Content-Type", "text/plain; version=0.0.4")
	metric := func(name, kind, help string, value any) {
		fmt.Fprintf(w, "# HELP %s %s\n# TYPE %s %s\n%s %v\n", name, help, name, kind, name, value)
	}
	metric(wellknown.EtcdBackupLastSuccessMetric, "gauge", "Time this agent last uploaded and verified a snapshot; 0 if never.", lastSuccess)
	metric(wellknown.EtcdBackupFailuresMetric, "counter", "Snapshots or uploads that failed.", a.failures)
	metric(wellknown.EtcdBackupIntervalMetric, "gauge", "Age at which the newest snapshot is replaced.", a.Interval.Seconds())
	metric("clusterforge_etcd_backup_leader", "gauge", "1 if this member leads and so writes the snapshots.", leader)
	metric("clusterforge_etcd_backup_last_size_bytes", "gauge", "Size of the last snapshot.", a.lastSize)
	metric("clusterforge_etcd_backup_last_duration_seconds", "gauge", "Time the last snapshot took to take, upload and verify.", a.lastSeconds)
	metric(wellknown.EtcdRestoreNeededMetric, "gauge", "1 if this member's data dir is empty, no quorum answers and the store shows the cluster existed.", restoreNeeded)
}

// WriteStatus records this member's state for people and for the restore-needed metric.
func WriteStatus(path, status string) error {
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, []byte(status+"\n"), 0o644); err != nil {
		return err
	}
	return os.Rename(tmp, path)
}
