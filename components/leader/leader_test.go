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
// candidate leads again, and the two terms never overlap.
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
	go func() {
		err := Run(ctx, Election{Client: client, Namespace: "kube-system", Lease: "test", Identity: "a",
			Timing: Timing{LeaseDuration: time.Second, RenewDeadline: 500 * time.Millisecond, RetryPeriod: 100 * time.Millisecond},
			Logf:   t.Logf,
		}, func(ctx context.Context) {
			if leading.Add(1) > 1 {
				overlapped.Add(1)
			}
			terms <- int(term.Add(1))
			<-ctx.Done()
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
	time.Sleep(3 * time.Second) // longer than the lease
	outage.Store(false)
	if n := waitTerm(t, terms); n != 2 {
		t.Fatalf("after the outage: term %d, want 2", n)
	}
	if overlapped.Load() > 0 {
		t.Error("a term started while the last one still ran")
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
