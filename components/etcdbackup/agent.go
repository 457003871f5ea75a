package etcdbackup

import (
	"context"
	"errors"
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
// cluster produces one snapshot per interval and one stream of deltas whichever members are up.
type Agent struct {
	// Etcd reaches this member only (its own client URL).
	Etcd *clientv3.Client
	// Endpoint is this member's client URL.
	Endpoint string
	Store    *Store
	// Registry is where the leader records each etcd cluster ID that had quorum (MayBootstrap).
	Registry *Registry
	// Interval is the age at which the newest stored snapshot is replaced: the RPO's main term.
	Interval  time.Duration
	Retention Retention
	// StatusFile is where this member's join step reports a refused bootstrap (see MayBootstrap).
	StatusFile string
	// DataDir is etcd's data dir, where a restore leaves its record (RestoreRecord).
	DataDir string
	Log     *log.Logger

	mu     sync.Mutex
	leader bool
	// registered is the etcd cluster ID last recorded in Registry; a restore brings a new one.
	registered  string
	lastSuccess time.Time
	lastSize    int64
	lastSeconds float64
	failures    int
	// The delta stream's last stored revision and when, the revision the verified chain reaches,
	// and the breaks found in it.
	deltaRevision, chainVerified int64
	deltaFlushed                 time.Time
	chainBreaks                  int
	// verified are the deltas read back and matched (the Run goroutine's own).
	verified map[string]bool
}

// CheckEvery is how often the leader's agent asks whether a snapshot is due.
func (a *Agent) CheckEvery() time.Duration { return min(a.Interval/10, 30*time.Second) }

// leaderCheck is how often the agent asks whether its member leads: a new leader's agent takes
// the stream over within it.
const leaderCheck = time.Second

// Run backs up until ctx ends. While this member leads, it streams every change into deltas
// (streamDeltas), reads their chain back every VerifyEvery, checks every CheckEvery whether a
// snapshot is due (Tick) and defragments the members worth it every DefragEvery. Failures are
// counted and logged, never fatal: the alerts on the snapshot's and the deltas' age report a
// persistent one.
func (a *Agent) Run(ctx context.Context) {
	var (
		stopStream context.CancelFunc // set while a stream runs
		ended      = make(chan error, 1)
		lastTick   time.Time
		lastVerify time.Time
		lastDefrag = time.Now()
	)
	// streamEnded handles the end of a stream; stopped: by Run, as this member no longer leads.
	streamEnded := func(err error, stopped bool) {
		stopStream = nil
		switch {
		case ctx.Err() != nil:
		case stopped:
			a.Log.Printf("delta stream stopped, this member no longer leads: %v", err)
		case errors.Is(err, ErrChainBroken):
			a.mu.Lock()
			a.chainBreaks++
			a.mu.Unlock()
			a.Log.Printf("delta stream: %v; taking a snapshot now (docs/runbooks/etcd.md)", err)
			if _, err := a.Snapshot(ctx); err != nil {
				a.Log.Printf("snapshot after the break: %v", err)
			}
		case err != nil:
			a.Log.Printf("delta stream: %v", a.fail(err))
		}
	}
	defer func() {
		if stopStream != nil {
			stopStream()
			<-ended
		}
	}()
	waiting := false
	for {
		select {
		case err := <-ended:
			streamEnded(err, false)
		default:
		}
		// Between a restore and its replay the cluster holds only the snapshot: a snapshot of it
		// would become the newest restorable point and hide the deltas the replay needs.
		if pending := a.replayPending(ctx); pending != waiting {
			waiting = pending
			a.Log.Printf("restored member: backups %s until clusterforge-etcd-backup replay has run", map[bool]string{true: "paused", false: "resumed"}[pending])
		}
		if waiting {
			if stopStream != nil {
				stopStream()
				streamEnded(<-ended, true)
			}
			if sleep(ctx, leaderCheck) != nil {
				return
			}
			continue
		}
		leads := a.leads(ctx)
		if !leads && stopStream != nil {
			stopStream()
			streamEnded(<-ended, true)
		}
		// The stream first: a snapshot or a defragmentation may take minutes, the stream must not wait.
		if leads && stopStream == nil {
			if reached, ok, err := a.chainEnd(ctx); err != nil {
				a.Log.Printf("delta stream: %v", a.fail(err))
			} else if ok {
				sctx, cancel := context.WithCancel(ctx)
				stopStream = cancel
				go func() { ended <- a.streamDeltas(sctx, reached+1) }()
			}
		}
		if leads && time.Since(lastTick) >= a.CheckEvery() {
			if err := a.Tick(ctx); err != nil && ctx.Err() == nil {
				a.Log.Printf("backup failed: %v", err)
			}
			lastTick = time.Now()
		}
		if leads && time.Since(lastDefrag) >= DefragEvery {
			steps, err := Defragment(ctx, a.Etcd, a.Store, a.Interval, DefaultDefragPolicy())
			for _, s := range steps {
				a.Log.Printf("defragmentation: %s", s)
			}
			if err != nil && ctx.Err() == nil {
				a.Log.Printf("defragmentation: %v", a.fail(err))
			}
			lastDefrag = time.Now()
		}
		if leads && time.Since(lastVerify) >= VerifyEvery {
			if err := a.verifyChain(ctx); err != nil && ctx.Err() == nil {
				a.Log.Printf("delta chain: %v", a.fail(err))
			}
			lastVerify = time.Now()
		}
		if sleep(ctx, leaderCheck) != nil {
			return
		}
	}
}

// replayPending reports whether this member was restored and the deltas not yet replayed into
// its cluster; when it cannot tell, it answers yes.
func (a *Agent) replayPending(ctx context.Context) bool {
	if a.DataDir == "" {
		return false
	}
	restored, err := ReadRestoreRecord(a.DataDir)
	if err != nil {
		return false // never restored
	}
	progress, _, _, _, err := readProgress(ctx, a.Etcd, restored.Token)
	return err != nil || !progress.Done
}

func sleep(ctx context.Context, d time.Duration) error {
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-time.After(d):
		return nil
	}
}

// leads asks this member whether it leads raft; a member that does not answer does not lead, and
// its peers carry on.
func (a *Agent) leads(ctx context.Context) bool {
	_, leads := a.status(ctx)
	return leads
}

func (a *Agent) status(ctx context.Context) (*clientv3.StatusResponse, bool) {
	status, err := a.Etcd.Status(ctx, a.Endpoint)
	leads := err == nil && status.Leader == status.Header.MemberId
	a.setLeader(leads)
	return status, leads
}

// Tick takes a snapshot if this member leads and the newest stored one is at least Interval old.
func (a *Agent) Tick(ctx context.Context) error {
	status, leads := a.status(ctx)
	if !leads {
		return nil
	}
	if id := ClusterIDString(status.Header.ClusterId); a.registered != id {
		if err := a.Registry.Register(ctx, id); err != nil {
			return a.fail(err)
		}
		a.registered = id
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
// A restored member's, before the replay, refuses (replayPending).
func (a *Agent) Snapshot(ctx context.Context) (Snapshot, error) {
	if a.replayPending(ctx) {
		return Snapshot{}, errors.New("this member was restored and the deltas are not replayed yet: a snapshot now would hide them; run clusterforge-etcd-backup replay first")
	}
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
	snap, err := a.Store.Upload(ctx, stream, began, ClusterIDString(status.Header.ClusterId), status.Header.Revision)
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
	deltas, err := a.Store.Deltas(ctx)
	if err != nil {
		return err
	}
	for _, old := range ExpiredDeltas(snaps, deltas) {
		if err := a.Store.DeleteDelta(ctx, old.Name); err != nil {
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

// ClusterIDString is how the store and the registry write an etcd cluster ID.
func ClusterIDString(id uint64) string { return fmt.Sprintf("%016x", id) }

// ServeHTTP writes the agent's metrics in Prometheus' text format.
func (a *Agent) ServeHTTP(w http.ResponseWriter, _ *http.Request) {
	a.mu.Lock()
	defer a.mu.Unlock()
	restoreNeeded := 0
	if status, err := os.ReadFile(a.StatusFile); err == nil && strings.HasPrefix(string(status), RestoreNeeded) {
		restoreNeeded = 1
	}
	seconds := func(t time.Time) float64 {
		if t.IsZero() {
			return 0
		}
		return float64(t.UnixMilli()) / 1000
	}
	leader := 0
	if a.leader {
		leader = 1
	}
	w.Header().Set("Content-Type", "text/plain; version=0.0.4")
	metric := func(name, kind, help string, value any) {
		fmt.Fprintf(w, "# HELP %s %s\n# TYPE %s %s\n%s %v\n", name, help, name, kind, name, value)
	}
	metric(wellknown.EtcdBackupLastSuccessMetric, "gauge", "Time this agent last uploaded and verified a snapshot; 0 if never.", seconds(a.lastSuccess))
	metric(wellknown.EtcdBackupFailuresMetric, "counter", "Snapshots, uploads, deltas or chain reads that failed.", a.failures)
	metric(wellknown.EtcdBackupDeltaFlushedMetric, "gauge", "Time this agent last stored a delta; 0 if never.", seconds(a.deltaFlushed))
	metric(wellknown.EtcdBackupDeltaRevisionMetric, "gauge", "Last revision this agent stored in a delta.", a.deltaRevision)
	metric(wellknown.EtcdBackupChainVerifiedMetric, "gauge", "Revision the newest verified snapshot and the deltas read back after it reach.", a.chainVerified)
	metric(wellknown.EtcdBackupChainBreaksMetric, "counter", "Breaks found in the delta chain (a missing or corrupt delta, or revisions compacted before they were watched); each is followed by a snapshot.", a.chainBreaks)
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
