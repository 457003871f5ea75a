// Package brake is the scale-down brake (L14): within one window, no actor removes more than a
// fixed share of a pool's nodes or of the cluster's, and a node marked for removal counts as long
// as it is still there, however long ago it was marked. The seeds' autoscaler once terminated every
// worker after a cluster-wide health-check failure; a brake turns that into a refusal and an
// alert. The decision is a pure function of what was removed lately and the fleet's size, so the
// admission webhook and the remediation controller ask the same question the same way.
package brake

import (
	"fmt"
	"time"
)

// Policy bounds removals.
type Policy struct {
	// MaxFraction is the share of a pool's nodes, and of the cluster's, that may be removed within
	// one Window. Default 0.5 (L14: "more than 50%").
	MaxFraction float64
	// Window is how long a removal counts against the budget. Default 10 minutes: longer than a
	// cluster-autoscaler scale-down pass and shorter than a remediation controller's grace period,
	// so a brake that engaged lets go once the burst is over.
	Window time.Duration
}

// DefaultPolicy is L14's brake.
func DefaultPolicy() Policy { return Policy{MaxFraction: 0.5, Window: 10 * time.Minute} }

// Validate names a bad field.
func (p Policy) Validate() error {
	if !(p.MaxFraction > 0 && p.MaxFraction < 1) {
		return fmt.Errorf("brake: MaxFraction %v: want a share between 0 and 1 (exclusive), e.g. 0.5", p.MaxFraction)
	}
	if p.Window <= 0 {
		return fmt.Errorf("brake: Window %s: want a positive duration, e.g. 10m", p.Window)
	}
	return nil
}

// Removal is one node taken out of the fleet (deleted, or marked for deletion).
type Removal struct {
	Node string
	Pool string
	// By is the actor: "cluster-autoscaler", "remediation".
	By string
	At time.Time
}

// Fleet is the nodes present now, by name.
type Fleet map[string]Present

// Present is a node of the fleet: its pool, and whether a removal taint marks it already.
type Present struct {
	Pool   string
	Marked bool
}

// Refusal is a removal the brake holds back.
type Refusal struct {
	Candidate Removal
	// Scope is the pool's name, or "cluster".
	Scope            string
	Removed, Of, Max int
}

func (r *Refusal) Error() string {
	return fmt.Sprintf("scale-down brake: removing %s (%s, by %s) would make %d of %s's %d nodes removed within the window or marked for removal; at most %d may go (L14). "+
		"If this is meant, remove them in smaller steps or wait for the window to pass",
		r.Candidate.Node, r.Candidate.Pool, r.Candidate.By, r.Removed+1, r.Scope, r.Of, r.Max)
}

// Allow says whether candidate may be removed now. A node counts as removed once, if the window
// holds its removal or it is present and marked; the candidate's own entry does not count. Sizes
// are the nodes present plus those removed within the window and gone, so a burst cannot shrink
// its own denominator. A pool or cluster of n nodes may have floor(n × MaxFraction) removed, and at
// least one: a brake must not freeze a one-node pool forever.
func (p Policy) Allow(now time.Time, recent []Removal, candidate Removal, fleet Fleet) error {
	removed := map[string]string{} // node → pool
	for _, r := range recent {
		if now.Sub(r.At) < p.Window {
			removed[r.Node] = r.Pool
		}
	}
	poolSize := 0
	for name, n := range fleet {
		if n.Marked {
			removed[name] = n.Pool
		}
		if n.Pool == candidate.Pool {
			poolSize++
		}
	}
	delete(removed, candidate.Node)
	clusterSize, inPool := len(fleet), 0
	for name, pool := range removed {
		_, present := fleet[name]
		if !present {
			clusterSize++
		}
		if pool == candidate.Pool {
			inPool++
			if !present {
				poolSize++
			}
		}
	}
	for _, scope := range []struct {
		name        string
		removed, of int
	}{
		{candidate.Pool, inPool, poolSize},
		{"cluster", len(removed), clusterSize},
	} {
		limit := max(1, int(float64(scope.of)*p.MaxFraction))
		if scope.removed+1 > limit {
			return &Refusal{Candidate: candidate, Scope: scope.name, Removed: scope.removed, Of: scope.of, Max: limit}
		}
	}
	return nil
}

// Prune drops the removals the window no longer counts.
func (p Policy) Prune(now time.Time, recent []Removal) []Removal {
	kept := recent[:0]
	for _, r := range recent {
		if now.Sub(r.At) < p.Window {
			kept = append(kept, r)
		}
	}
	return kept
}
