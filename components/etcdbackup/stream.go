package etcdbackup

import (
	"context"
	"errors"
	"fmt"
	"time"

	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// DeltaFlushEvery is how often the agent stores what its watch delivered: with the upload's
// time, the bound on the writes a total loss can take.
const DeltaFlushEvery = 500 * time.Millisecond

// VerifyEvery is how often the leader's agent reads back the delta chain after the newest
// verified snapshot.
const VerifyEvery = 10 * time.Second

// streamDeltas watches every change of the cluster from revision from on and stores the changes
// as deltas every DeltaFlushEvery, until ctx ends, this member loses its leader or the watch
// breaks; what it holds then is stored first. An error wrapping ErrChainBroken means revisions
// were lost to it (etcd compacted them before they were watched).
func (a *Agent) streamDeltas(ctx context.Context, from int64) error {
	wctx, cancel := context.WithCancel(clientv3.WithRequireLeader(ctx))
	defer cancel()
	watch := a.Etcd.Watch(wctx, "", clientv3.WithPrefix(), clientv3.WithRev(from))
	var pending []*mvccpb.Event
	next := from // the revision the next event must be at
	flush := func() error {
		if len(pending) == 0 {
			return nil
		}
		// What was watched is stored even as ctx ends: a stopping agent keeps nothing back.
		sctx, done := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
		defer done()
		d, err := a.Store.PutDelta(sctx, pending[0].Kv.ModRevision, next-1, pending, time.Now())
		if err != nil {
			return err
		}
		pending = nil
		a.mu.Lock()
		a.deltaRevision, a.deltaFlushed = d.To, d.Flushed
		a.mu.Unlock()
		return nil
	}
	tick := time.NewTicker(DeltaFlushEvery)
	defer tick.Stop()
	for {
		select {
		case <-tick.C:
			if err := flush(); err != nil {
				return err
			}
		case resp, ok := <-watch:
			if !ok {
				return errors.Join(fmt.Errorf("the watch from revision %d ended: %v", next, ctx.Err()), flush())
			}
			if resp.CompactRevision > 0 {
				return errors.Join(fmt.Errorf("%w: etcd compacted up to revision %d before the agent watched revision %d", ErrChainBroken, resp.CompactRevision, next), flush())
			}
			if err := resp.Err(); err != nil {
				return errors.Join(fmt.Errorf("the watch from revision %d: %w", next, err), flush())
			}
			for _, ev := range resp.Events {
				switch rev := ev.Kv.ModRevision; {
				case rev == next:
					next++
				case rev == next-1 && len(pending) > 0: // another key of the same transaction
				default:
					return errors.Join(fmt.Errorf("%w: the watch delivered revision %d after %d", ErrChainBroken, rev, next-1), flush())
				}
				pending = append(pending, (*mvccpb.Event)(ev))
			}
		}
	}
}

// chainEnd is the revision the stored chain reaches after the newest verified snapshot, where
// the stream resumes; ok is false when there is no verified snapshot to start from.
func (a *Agent) chainEnd(ctx context.Context) (reached int64, ok bool, err error) {
	snaps, err := a.Store.List(ctx)
	if err != nil {
		return 0, false, err
	}
	base := newestVerified(snaps, 1)
	if len(base) == 0 {
		return 0, false, nil
	}
	deltas, err := a.Store.Deltas(ctx)
	if err != nil {
		return 0, false, err
	}
	_, reached, _ = Chain(base[0].Revision, deltas)
	return reached, true, nil
}

// verifyChain reads back every delta after the newest verified snapshot not read before and
// checks that they meet. A broken chain is counted and logged, and a snapshot taken at once: a
// restore must not depend on the deltas before the break. A delta that could not be read is tried
// again on the next pass, not counted as a break.
func (a *Agent) verifyChain(ctx context.Context) error {
	snaps, err := a.Store.List(ctx)
	if err != nil {
		return err
	}
	base := newestVerified(snaps, 1)
	if len(base) == 0 {
		return nil
	}
	deltas, err := a.Store.Deltas(ctx)
	if err != nil {
		return err
	}
	chain, _, broken := Chain(base[0].Revision, deltas)
	read, reached := map[string]bool{}, base[0].Revision
	for _, d := range chain {
		if !a.verified[d.Name] {
			if _, err := a.Store.ReadDelta(ctx, d); err != nil {
				if !errors.Is(err, ErrChainBroken) {
					return err
				}
				broken = err
				break
			}
		}
		read[d.Name], reached = true, d.To
	}
	a.mu.Lock()
	a.verified = read // forgets the deltas retention removed
	a.chainVerified = reached
	if broken == nil {
		a.mu.Unlock()
		return nil
	}
	a.chainBreaks++
	a.mu.Unlock()
	a.Log.Printf("delta chain after snapshot %s: %v; taking a snapshot now (docs/runbooks/etcd.md)", base[0].Name, broken)
	_, err = a.Snapshot(ctx)
	return err
}
