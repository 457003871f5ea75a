// Package leader runs a function while this candidate holds a Lease, and stands for election again
// when it loses it. client-go's elector returns once leadership ends: a loop that stopped there
// would leave no leader after a few apiserver restarts.
package leader

import (
	"context"
	"sync"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/leaderelection"
	"k8s.io/client-go/tools/leaderelection/resourcelock"
)

// Election names the lease and this candidate.
type Election struct {
	Client    kubernetes.Interface
	Namespace string
	Lease     string
	// Identity is this candidate's name in the lease (a machine or pod name).
	Identity string
	// Timing is zero for DefaultTiming.
	Timing Timing
	// Logf reports leadership changes.
	Logf func(format string, args ...any)
}

// Timing is client-go's lease duration, renew deadline and retry period.
type Timing struct{ LeaseDuration, RenewDeadline, RetryPeriod time.Duration }

// DefaultTiming is kube-controller-manager's.
var DefaultTiming = Timing{LeaseDuration: 15 * time.Second, RenewDeadline: 10 * time.Second, RetryPeriod: 2 * time.Second}

// LostLease is what a candidate logs when its term ends and it stands again.
const LostLease = "lost the lease; standing again"

// Run calls lead each time this candidate wins the lease, with a context that ends when it loses
// it, and stands again, until ctx ends. A term ends too when lead returns early: a candidate
// does not hold the lease with nothing running. The lease is not released on the way out, so the
// next leader waits for it to expire while this term's lead finishes; within this process, a
// new term starts only after the last one's lead returned. It returns an error only for a
// configuration that cannot run at all.
func Run(ctx context.Context, e Election, lead func(context.Context)) error {
	timing := e.Timing
	if timing == (Timing{}) {
		timing = DefaultTiming
	}
	logf := e.Logf
	if logf == nil {
		logf = func(string, ...any) {}
	}
	var term sync.Mutex // held while a term's lead runs (client-go starts it in a goroutine)
	for ctx.Err() == nil {
		termCtx, endTerm := context.WithCancel(ctx)
		elector, err := leaderelection.NewLeaderElector(leaderelection.LeaderElectionConfig{
			Lock: &resourcelock.LeaseLock{
				LeaseMeta:  metav1.ObjectMeta{Namespace: e.Namespace, Name: e.Lease},
				Client:     e.Client.CoordinationV1(),
				LockConfig: resourcelock.ResourceLockConfig{Identity: e.Identity},
			},
			LeaseDuration: timing.LeaseDuration, RenewDeadline: timing.RenewDeadline, RetryPeriod: timing.RetryPeriod,
			Callbacks: leaderelection.LeaderCallbacks{
				OnStartedLeading: func(leading context.Context) {
					term.Lock()
					defer term.Unlock()
					defer endTerm()
					if leading.Err() == nil {
						logf("%s leads %s", e.Identity, e.Lease)
						lead(leading)
					}
				},
				OnStoppedLeading: func() { logf("%s %s %s", e.Identity, e.Lease, LostLease) },
			},
		})
		if err != nil {
			endTerm()
			return err
		}
		elector.Run(termCtx)
		endTerm()
		term.Lock() // the term's lead, if it started, has returned
		term.Unlock()
	}
	return nil
}
