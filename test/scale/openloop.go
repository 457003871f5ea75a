package scale

import (
	"context"
	"sync/atomic"
	"time"
)

// openLoop makes calls at a rate whatever the earlier ones are waiting for, as a fleet's clients
// do: a closed loop (one call after another) slows down with the server and so measures the
// harness, not the server. A call due while inFlight are outstanding is counted as not sent:
// this machine could not offer it.
type openLoop struct {
	sent, unsent atomic.Int64
}

// startOpenLoop calls call(n) for n = 0, 1, … at rate() a second (read again at each tick, so
// it may change) until ctx ends, each call in a goroutine of its own.
func startOpenLoop(ctx context.Context, rate func() float64, inFlight int, call func(n int)) *openLoop {
	o := &openLoop{}
	slots := make(chan struct{}, inFlight)
	go func() {
		// Every 10 ms, whatever fell due since the last tick, so that a late tick sends more
		// rather than the rate falling quietly.
		last, due, n := time.Now(), 0.0, 0
		every(ctx, 10*time.Millisecond, func() {
			now := time.Now()
			due += rate() * now.Sub(last).Seconds()
			last = now
			for ; float64(n+1) <= due; n++ {
				select {
				case slots <- struct{}{}:
					o.sent.Add(1)
					go func(n int) {
						defer func() { <-slots }()
						call(n)
					}(n)
				default:
					o.unsent.Add(1)
				}
			}
		})
	}()
	return o
}

// Offered counts the calls sent, and those that fell due while inFlight were outstanding.
func (o *openLoop) Offered() (sent, unsent int64) { return o.sent.Load(), o.unsent.Load() }
