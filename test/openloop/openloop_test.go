package openloop

import (
	"context"
	"sync/atomic"
	"testing"
	"time"
)

// Calls slower than the rate's period do not slow the rate down: a closed loop would send 5.
func TestKeepsItsRateWhateverTheCallsWaitFor(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	o := Start(ctx, func() float64 { return 100 }, 1000, func(int) { time.Sleep(200 * time.Millisecond) })
	<-ctx.Done()
	if sent, unsent := o.Offered(); sent < 80 || sent > 101 || unsent != 0 {
		t.Fatalf("sent %d, not sent %d in 1 s at 100/s; want about 100 and 0", sent, unsent)
	}
}

// A call due while inFlight are outstanding is counted as not sent, never queued.
func TestCountsWhatItCouldNotSend(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	o := Start(ctx, func() float64 { return 100 }, 5, func(int) { <-ctx.Done() })
	<-ctx.Done()
	if sent, unsent := o.Offered(); sent != 5 || unsent < 75 {
		t.Fatalf("sent %d, not sent %d with 5 in flight at 100/s; want 5 and about 95", sent, unsent)
	}
}

// Wait waits for the calls still out when the loop ends, so their results can be read.
func TestWaitReturnsAfterTheLastCall(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	var finished atomic.Int64
	o := Start(ctx, func() float64 { return 100 }, 100, func(int) { time.Sleep(300 * time.Millisecond); finished.Add(1) })
	o.Wait()
	if sent, _ := o.Offered(); sent == 0 || finished.Load() != sent {
		t.Fatalf("Wait returned with %d of %d calls finished", finished.Load(), sent)
	}
}
