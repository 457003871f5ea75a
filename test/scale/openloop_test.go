package scale

import (
	"context"
	"testing"
	"time"
)

// Calls slower than the rate's period do not slow the rate down: a closed loop would send 5.
func TestOpenLoopKeepsItsRateWhateverTheCallsWaitFor(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	o := startOpenLoop(ctx, func() float64 { return 100 }, 1000, func(int) { time.Sleep(200 * time.Millisecond) })
	<-ctx.Done()
	if sent, unsent := o.Offered(); sent < 80 || sent > 101 || unsent != 0 {
		t.Fatalf("sent %d, not sent %d in 1 s at 100/s; want about 100 and 0", sent, unsent)
	}
}

// A call due while inFlight are outstanding is counted as not sent, never queued.
func TestOpenLoopCountsWhatItCouldNotSend(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	o := startOpenLoop(ctx, func() float64 { return 100 }, 5, func(int) { <-ctx.Done() })
	<-ctx.Done()
	if sent, unsent := o.Offered(); sent != 5 || unsent < 75 {
		t.Fatalf("sent %d, not sent %d with 5 in flight at 100/s; want 5 and about 95", sent, unsent)
	}
}
