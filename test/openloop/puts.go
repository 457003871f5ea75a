package openloop

import (
	"context"
	"strconv"
	"strings"
	"sync"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
)

// The etcd benchmarks' steady write load, as the backup goals state it: 1,000 writes a second of
// 1 KiB each, open loop.
const (
	EtcdWritesPerSecond = 1000
	EtcdWriteBytes      = 1 << 10
	etcdWritesInFlight  = 64
	// DeliveredShare is the least share of its offered writes a window must deliver to count:
	// below it the run measured the harness, and is reported invalid.
	DeliveredShare = 0.95
)

// Puts writes keys prefix0, prefix1, … of EtcdWriteBytes into etcd at a rate and records when
// each write was acknowledged: only acknowledged writes are owed.
type Puts struct {
	loop  *Loop
	stop  context.CancelFunc
	mu    sync.Mutex
	acked map[string]time.Time
}

// StartPuts starts writing perSecond writes a second until Stop.
func StartPuts(ctx context.Context, cli *clientv3.Client, prefix string, perSecond float64) *Puts {
	p := &Puts{acked: map[string]time.Time{}}
	value := strings.Repeat("x", EtcdWriteBytes)
	writing, stop := context.WithCancel(ctx)
	p.stop = stop
	p.loop = Start(writing, func() float64 { return perSecond }, etcdWritesInFlight, func(n int) {
		key := prefix + strconv.Itoa(n)
		wctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		defer cancel()
		if _, err := cli.Put(wctx, key, value); err == nil {
			p.mu.Lock()
			p.acked[key] = time.Now()
			p.mu.Unlock()
		}
	})
	return p
}

// Offered is how many writes fell due so far, sent or not.
func (p *Puts) Offered() int {
	sent, unsent := p.loop.Offered()
	return int(sent + unsent)
}

// Acked is how many writes were acknowledged so far.
func (p *Puts) Acked() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.acked)
}

// Stop stops offering, waits for the writes in flight and returns every acknowledged one with
// when it was acknowledged.
func (p *Puts) Stop() map[string]time.Time {
	p.stop()
	p.loop.Wait()
	return p.acked
}
