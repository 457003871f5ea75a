package etcdbackup

import (
	"context"
	"fmt"
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

// replayedPrefix marks, per restore (its token), a cluster the deltas were replayed into,
// outside the apiservers' /registry; later snapshots carry it, later restores have new tokens.
const replayedPrefix = "/clusterforge/restore/replayed/"

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
// cluster just restored from it and not yet serving: each delta read and checked
// whole before any of its changes is applied, up to the first that is missing or corrupt
// (reported in Stopped). The replayed keys get new revisions, above the restore's bump.
// A cluster not at the revision that restore left, or replayed into before, is refused
// untouched: replaying old changes over newer writes would undo them.
func Replay(ctx context.Context, cli *clientv3.Client, s *Store, restored RestoreRecord) (ReplayReport, error) {
	base := restored.Revision
	report := ReplayReport{Base: base, Reached: base}
	replayedKey := replayedPrefix + restored.Token
	marker, err := cli.Get(ctx, replayedKey)
	if err != nil {
		return report, err
	}
	if len(marker.Kvs) > 0 {
		return report, fmt.Errorf("the deltas were replayed into this cluster already (%s); replaying again would undo the writes since", marker.Kvs[0].Value)
	}
	// A restore of revision base leaves the cluster at base+RestoreBump (one less for an empty
	// snapshot, whose revision 1 holds no key): a live cluster is far below, and any write since
	// the restore is above.
	if rev := marker.Header.Revision; rev < base+RestoreBump-1 || rev > base+RestoreBump {
		return report, fmt.Errorf("this cluster is at revision %d, not %d, where the restore from %s left it: it was restored from another snapshot, or written to since (an apiserver started?); replaying old changes into it would undo newer writes. Restore again, and replay before any apiserver starts",
			rev, base+RestoreBump, restored.Snapshot)
	}
	deltas, err := s.Deltas(ctx)
	if err != nil {
		return report, err
	}
	chain, _, broken := Chain(base, deltas)
	t := &replayTxn{cli: cli, keys: map[string]bool{}}
	for _, d := range chain {
		events, err := s.ReadDelta(ctx, d)
		if err != nil {
			report.Stopped = err
			break
		}
		for _, ev := range events {
			if ev.Kv.ModRevision <= report.Reached { // in the snapshot or an earlier delta
				continue
			}
			if err := t.add(ctx, ev); err != nil {
				return report, fmt.Errorf("replay delta %s: %w", d.Name, err)
			}
			report.Events++
		}
		if err := t.commit(ctx); err != nil {
			return report, fmt.Errorf("replay delta %s: %w", d.Name, err)
		}
		report.Deltas++
		report.Reached, report.LastWrite = d.To, d.Flushed
	}
	if report.Stopped == nil {
		report.Stopped = broken
	}
	if _, err := cli.Put(ctx, replayedKey, report.String()); err != nil {
		return report, err
	}
	return report, nil
}

// replayTxn gathers changes into transactions of distinct keys within etcd's limits.
type replayTxn struct {
	cli   *clientv3.Client
	lease clientv3.LeaseID
	ops   []clientv3.Op
	keys  map[string]bool
	bytes int
}

func (t *replayTxn) add(ctx context.Context, ev *mvccpb.Event) error {
	key := string(ev.Kv.Key)
	size := len(ev.Kv.Key) + len(ev.Kv.Value)
	if t.keys[key] || len(t.ops) == replayTxnOps || (len(t.ops) > 0 && t.bytes+size > replayTxnBytes) {
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
	return nil
}

func (t *replayTxn) commit(ctx context.Context) error {
	if len(t.ops) == 0 {
		return nil
	}
	if _, err := t.cli.Txn(ctx).Then(t.ops...).Commit(); err != nil {
		return err
	}
	t.ops, t.keys, t.bytes = t.ops[:0], map[string]bool{}, 0
	return nil
}
