package etcdbackup

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// Replay's transactions stay inside etcd's defaults: --max-txn-ops 128 and --max-request-bytes
// 1.5 MiB.
const (
	replayTxnOps   = 128
	replayTxnBytes = 1 << 20
)

// ReplayLeaseTTL is the lease replayed keys get when their original had one: a watch does not
// say how long that lease had left. On etcd-main only the apiservers' master leases have one,
// and the restore clears those; an unsplit cluster's Events expire after an hour, as
// kube-apiserver's --event-ttl default does.
const ReplayLeaseTTL = time.Hour

// replayedPrefix marks, per restore (its token), a cluster the deltas are or were replayed into,
// outside the apiservers' /registry; later snapshots carry it, later restores have new tokens.
const replayedPrefix = "/clusterforge/restore/replayed/"

// replayProgress is the marker's value. It is written in the same transaction as the changes it
// counts, and each write requires the marker unchanged since this replay's last one: an
// interrupted replay resumes where it stopped, and two replays cannot interleave.
type replayProgress struct {
	Done bool `json:"done"`
	// Next is the first change not yet applied: the Index-th (from 0) of original revision
	// Revision; one revision's changes may span transactions.
	Revision int64  `json:"revision"`
	Index    int    `json:"index"`
	Events   int    `json:"events"`
	Report   string `json:"report,omitempty"`
}

// readProgress reads the marker of a restore: found false if no replay has started.
func readProgress(ctx context.Context, cli *clientv3.Client, token string) (p replayProgress, modRevision, clusterRevision int64, found bool, err error) {
	resp, err := cli.Get(ctx, replayedPrefix+token)
	if err != nil {
		return p, 0, 0, false, err
	}
	if len(resp.Kvs) == 0 {
		return p, 0, resp.Header.Revision, false, nil
	}
	if json.Unmarshal(resp.Kvs[0].Value, &p) != nil { // an earlier release's marker: its report, written when done
		p = replayProgress{Done: true, Report: string(resp.Kvs[0].Value)}
	}
	return p, resp.Kvs[0].ModRevision, resp.Header.Revision, true, nil
}

// ReplayReport is what Replay applied.
type ReplayReport struct {
	// Base is the revision of the snapshot the members were restored from.
	Base           int64
	Deltas, Events int
	// Reached is the revision of the last change replayed (Base when there was none), and
	// LastWrite the time its delta was stored: every write acknowledged before it is back.
	Reached   int64
	LastWrite time.Time
	// Stopped is why the replay ended before the newest stored delta, if it did.
	Stopped error
}

func (r ReplayReport) String() string {
	s := fmt.Sprintf("replayed %d changes from %d deltas after revision %d: reached revision %d", r.Events, r.Deltas, r.Base, r.Reached)
	if !r.LastWrite.IsZero() {
		s += ", stored at " + r.LastWrite.Format(time.RFC3339Nano)
	}
	if r.Stopped != nil {
		s += "; stopped early: " + r.Stopped.Error()
	}
	return s
}

// Replay applies every change stored after the restored snapshot's revision, in order, to the
// cluster just restored from it and not yet serving: each delta read and checked whole before
// any of its changes is applied, up to the first that is missing or corrupt (reported in
// Stopped). The replayed keys get new revisions, above the restore's bump. A cluster not at the
// revision that restore (or an interrupted replay) left, or replayed into before, is refused
// untouched: replaying old changes over newer writes would undo them. A delta that cannot be
// downloaded is an error, not a stop: run Replay again and it resumes.
func Replay(ctx context.Context, cli *clientv3.Client, s *Store, restored RestoreRecord) (ReplayReport, error) {
	base := restored.Revision
	report := ReplayReport{Base: base, Reached: base}
	progress, markerRev, rev, resuming, err := readProgress(ctx, cli, restored.Token)
	if err != nil {
		return report, err
	}
	if progress.Done {
		return report, fmt.Errorf("the deltas were replayed into this cluster already (%s); replaying again would undo the writes since", quoted(progress.Report))
	}
	// A restore of revision base leaves the cluster at base+RestoreBump (one less for an empty
	// snapshot, whose revision 1 holds no key): a live cluster is far below. An interrupted
	// replay left it at its marker's last write. Above either, only the restored cluster's own
	// lease expiries may have written (the apiservers' master leases last seconds); anything
	// else is a write a replay would undo.
	since := base + RestoreBump
	if resuming {
		since = markerRev
	} else {
		progress = replayProgress{Revision: base + 1}
		if rev < since-1 {
			return report, fmt.Errorf("this cluster is at revision %d, below %d, where the restore from %s left it: it was not restored from that snapshot; replaying old changes into it would undo newer writes",
				rev, since, quoted(restored.Snapshot))
		}
	}
	if rev > since {
		if err := onlyStaleDeletes(ctx, cli, since+1, rev); err != nil {
			return report, fmt.Errorf("this cluster was written to since the restore from %s (%v): replaying old changes now would undo that; restore again, and replay before any apiserver starts",
				quoted(restored.Snapshot), err)
		}
	}
	t := &replayTxn{cli: cli, key: replayedPrefix + restored.Token, markerRev: markerRev, progress: progress, keys: map[string]bool{}}
	if err := t.commit(ctx); err != nil { // claims the marker
		return report, err
	}
	deltas, err := s.Deltas(ctx)
	if err != nil {
		return report, err
	}
	chain, _, broken := Chain(base, deltas)
	for _, d := range chain {
		events, err := s.ReadDelta(ctx, d)
		if err != nil && !errors.Is(err, ErrChainBroken) {
			return report, fmt.Errorf("%w; run replay again to resume", err)
		}
		if err != nil {
			report.Stopped = err
			break
		}
		index, last := 0, int64(0)
		for _, ev := range events {
			r := ev.Kv.ModRevision
			if r != last {
				index, last = 0, r
			}
			if r > t.progress.Revision || (r == t.progress.Revision && index >= t.progress.Index) {
				if err := t.add(ctx, ev, index); err != nil {
					return report, fmt.Errorf("replay delta %s: %w", d.Name, err)
				}
			}
			index++
		}
		if len(t.ops) > 0 {
			if err := t.commit(ctx); err != nil {
				return report, fmt.Errorf("replay delta %s: %w", d.Name, err)
			}
		}
		report.Deltas++
		report.Reached, report.LastWrite = d.To, d.Flushed
	}
	if report.Stopped == nil {
		report.Stopped = broken
	}
	report.Events = t.progress.Events
	t.progress.Done, t.progress.Report = true, report.String()
	return report, t.commit(ctx)
}

// replayTxn gathers changes into transactions of distinct keys within etcd's limits, each with
// the marker's progress, each only if the marker is as this replay last wrote it.
type replayTxn struct {
	cli       *clientv3.Client
	key       string
	markerRev int64 // 0: no marker yet
	progress  replayProgress
	lease     clientv3.LeaseID
	ops       []clientv3.Op
	keys      map[string]bool
	bytes     int
}

func (t *replayTxn) add(ctx context.Context, ev *mvccpb.Event, index int) error {
	key := string(ev.Kv.Key)
	size := len(ev.Kv.Key) + len(ev.Kv.Value)
	if t.keys[key] || len(t.ops) == replayTxnOps-1 || (len(t.ops) > 0 && t.bytes+size > replayTxnBytes) {
		if err := t.commit(ctx); err != nil {
			return err
		}
	}
	op := clientv3.OpDelete(key)
	if ev.Type == mvccpb.PUT {
		var opts []clientv3.OpOption
		if ev.Kv.Lease != 0 {
			if t.lease == 0 {
				grant, err := t.cli.Grant(ctx, int64(ReplayLeaseTTL.Seconds()))
				if err != nil {
					return fmt.Errorf("lease for replayed keys: %w", err)
				}
				t.lease = grant.ID
			}
			opts = append(opts, clientv3.WithLease(t.lease))
		}
		op = clientv3.OpPut(key, string(ev.Kv.Value), opts...)
	}
	t.ops = append(t.ops, op)
	t.keys[key] = true
	t.bytes += size
	t.progress.Revision, t.progress.Index = ev.Kv.ModRevision, index+1
	t.progress.Events++
	return nil
}

// commit writes the gathered changes and the progress they bring; with none, the progress alone.
func (t *replayTxn) commit(ctx context.Context) error {
	value, err := json.Marshal(t.progress)
	if err != nil {
		return err
	}
	resp, err := t.cli.Txn(ctx).If(clientv3.Compare(clientv3.ModRevision(t.key), "=", t.markerRev)).
		Then(append(t.ops, clientv3.OpPut(t.key, string(value)))...).Commit()
	if err != nil {
		return err
	}
	if !resp.Succeeded {
		return fmt.Errorf("another replay wrote %s meanwhile: refusing to interleave with it", t.key)
	}
	t.markerRev = resp.Header.Revision
	t.ops, t.keys, t.bytes = t.ops[:0], map[string]bool{}, 0
	return nil
}

// onlyStaleDeletes checks that revisions from to through are deletions under stalePrefixes alone:
// what a restored cluster's expiring master leases write by themselves.
func onlyStaleDeletes(ctx context.Context, cli *clientv3.Client, from, through int64) error {
	wctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	for resp := range cli.Watch(wctx, "", clientv3.WithPrefix(), clientv3.WithRev(from)) {
		if err := resp.Err(); err != nil {
			return fmt.Errorf("read revisions %d to %d: %w", from, through, err)
		}
		for _, ev := range resp.Events {
			if ev.Kv.ModRevision > through {
				return nil
			}
			stale := ev.Type == mvccpb.DELETE && slices.ContainsFunc(stalePrefixes, func(p string) bool { return strings.HasPrefix(string(ev.Kv.Key), p) })
			if !stale {
				return fmt.Errorf("revision %d changed %s", ev.Kv.ModRevision, quoted(string(ev.Kv.Key)))
			}
			if ev.Kv.ModRevision == through {
				return nil
			}
		}
	}
	return fmt.Errorf("read revisions %d to %d: %w", from, through, wctx.Err())
}
