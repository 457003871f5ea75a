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

// Run calls lead each time this candidate wins the lease, with a context that ends when it loses
// it, and stands again, until ctx ends. It returns an error only for a configuration that cannot
// run at all.
func Run(ctx context.Context, e Election, lead func(context.Context)) error {
	timing := e.Timing
	if timing == (Timing{}) {
		timing = DefaultTiming
	}
	logf := e.Logf
	if logf == nil {
		logf = func(string, ...any) {}
	}
	// Terms take turns: a new term's lead starts only after the last one's returned (client-go
	// starts each in a goroutine of its own).
	var term sync.Mutex
	config := leaderelection.LeaderElectionConfig{
		Lock: &resourcelock.LeaseLock{
			LeaseMeta:  metav1.ObjectMeta{Namespace: e.Namespace, Name: e.Lease},
			Client:     e.Client.CoordinationV1(),
			LockConfig: resourcelock.ResourceLockConfig{Identity: e.Identity},
		},
		ReleaseOnCancel: true,
		LeaseDuration:   timing.LeaseDuration, RenewDeadline: timing.RenewDeadline, RetryPeriod: timing.RetryPeriod,
		Callbacks: leaderelection.LeaderCallbacks{
			OnStartedLeading: func(ctx context.Context) {
				term.Lock()
				defer term.Unlock()
				if ctx.Err() == nil {
					logf("%s leads %s", e.Identity, e.Lease)
					lead(ctx)
				}
			},
			OnStoppedLeading: func() { logf("%s lost the lease %s; standing again", e.Identity, e.Lease) },
		},
	}
	for ctx.Err() == nil {
		elector, err := leaderelection.NewLeaderElector(config)
		if err != nil {
			return err
		}
		elector.Run(ctx)
	}
	term.Lock() // the last term's lead has returned
	term.Unlock()
	return nil
}
