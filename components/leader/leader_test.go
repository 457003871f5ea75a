package leader

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
)

// An apiserver that refuses lease writes for a while ends the term; once it answers again the
// candidate leads again, and the two terms never overlap, though the first lingers 2 s after its
// term ended (as remediation finishing a drain would).
func TestStandsAgainAfterLosingTheLease(t *testing.T) {
	client := fake.NewClientset()
	var outage atomic.Bool
	client.PrependReactor("*", "leases", func(k8stesting.Action) (bool, runtime.Object, error) {
		if outage.Load() {
			return true, nil, errors.New("apiserver unavailable")
		}
		return false, nil, nil
	})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	terms := make(chan int, 10)
	var leading, overlapped atomic.Int32
	var term atomic.Int32
	stopped := make(chan struct{})
	go func() {
		defer close(stopped)
		err := Run(ctx, Election{Client: client, Namespace: "kube-system", Lease: "test", Identity: "a",
			Timing: Timing{LeaseDuration: time.Second, RenewDeadline: 500 * time.Millisecond, RetryPeriod: 100 * time.Millisecond},
			Logf:   t.Logf,
		}, func(ctx context.Context) {
			if leading.Add(1) > 1 {
				overlapped.Add(1)
			}
			terms <- int(term.Add(1))
			<-ctx.Done()
			time.Sleep(2 * time.Second)
			leading.Add(-1)
		})
		if err != nil {
			t.Error(err)
		}
	}()
	if n := waitTerm(t, terms); n != 1 {
		t.Fatalf("first term is %d", n)
	}
	outage.Store(true)
	time.Sleep(1500 * time.Millisecond) // past the renew deadline: the term ends, its lead lingers
	outage.Store(false)
	if n := waitTerm(t, terms); n != 2 {
		t.Fatalf("after the outage: term %d, want 2", n)
	}
	if overlapped.Load() > 0 {
		t.Error("a term started while the last one still ran")
	}
	cancel()
	<-stopped
}

// A lead that returns while the candidate holds the lease ends the term: the candidate stands
// again and leads again, rather than holding the lease with nothing running.
func TestALeadThatReturnsEndsItsTerm(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var terms atomic.Int32
	done := make(chan error, 1)
	go func() {
		done <- Run(ctx, Election{Client: fake.NewClientset(), Namespace: "kube-system", Lease: "test", Identity: "a",
			Timing: Timing{LeaseDuration: time.Second, RenewDeadline: 500 * time.Millisecond, RetryPeriod: 100 * time.Millisecond}, Logf: t.Logf},
			func(context.Context) {
				if terms.Add(1) == 3 {
					cancel()
				}
			})
	}()
	select {
	case err := <-done:
		if err != nil || terms.Load() < 3 {
			t.Fatalf("Run returned %v after %d terms, want 3 terms", err, terms.Load())
		}
	case <-time.After(20 * time.Second):
		t.Fatalf("%d terms in 20 s: a lead that returned kept its term", terms.Load())
	}
}

func waitTerm(t *testing.T, terms <-chan int) int {
	t.Helper()
	select {
	case n := <-terms:
		return n
	case <-time.After(10 * time.Second):
		t.Fatal("no term started within 10 s")
		return 0
	}
}
