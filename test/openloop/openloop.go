// Package openloop offers load as a fleet's clients do: calls at a rate whatever the earlier ones
// are waiting for. A closed loop (one call after another) slows down with the server and so
// measures the harness, not the server. The scale and etcd benchmarks drive their load with it.
package openloop

import (
	"context"
	"sync"
	"sync/atomic"
	"time"
)

// Loop counts what it sent and what it could not: a call due while inFlight are outstanding is
// not sent, since this machine could not offer it, and a benchmark reads that as under-driven.
type Loop struct {
	sent, unsent atomic.Int64
	calls        sync.WaitGroup
	done         chan struct{}
}

// Start calls call(n) for n = 0, 1, … at rate() a second (read again at each tick, so it may
// change) until ctx ends, each call in a goroutine of its own, at most inFlight at once.
func Start(ctx context.Context, rate func() float64, inFlight int, call func(n int)) *Loop {
	o := &Loop{done: make(chan struct{})}
	slots := make(chan struct{}, inFlight)
	go func() {
		defer close(o.done)
		tick := time.NewTicker(10 * time.Millisecond)
		defer tick.Stop()
		// At each tick, whatever fell due since the last, so that a late tick sends more rather
		// than the rate falling quietly.
		last, due, n := time.Now(), 0.0, 0
		for {
			select {
			case <-ctx.Done():
				return
			case now := <-tick.C:
				due += rate() * now.Sub(last).Seconds()
				last = now
			}
			for ; float64(n+1) <= due; n++ {
				select {
				case slots <- struct{}{}:
					o.sent.Add(1)
					o.calls.Add(1)
					go func(n int) {
						defer o.calls.Done()
						defer func() { <-slots }()
						call(n)
					}(n)
				default:
					o.unsent.Add(1)
				}
			}
		}
	}()
	return o
}

// Wait returns once ctx has ended and every call sent has returned.
func (o *Loop) Wait() {
	<-o.done
	o.calls.Wait()
}

// Offered counts the calls sent, and those that fell due while inFlight were outstanding.
func (o *Loop) Offered() (sent, unsent int64) { return o.sent.Load(), o.unsent.Load() }
