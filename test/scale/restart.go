package scale

import (
	"context"
	"fmt"
	"math"
	"net/http"
	"net/url"
	"sync"
	"sync/atomic"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"

	"github.com/clusterforge/clusterforge/components/watchlist"
	"github.com/clusterforge/clusterforge/test/procfs"
)

// RestartOptions shape the restart storm: every apiserver restarted at once while Informers
// kubelet-like informers (each its own connection, watching its node's pods) reconnect.
type RestartOptions struct {
	Informers int
	// Settle is how long every probe call must meet its SLO for the control plane to count as
	// recovered; Timeout ends a storm that never recovers.
	Settle, Timeout time.Duration
}

// RestartReport is one restart storm.
type RestartReport struct {
	Nodes     int `json:"nodes"`
	Informers int `json:"informers"`
	// WatchList is whether the informers streamed their initial state (client-go's
	// WatchListClient) rather than listed it, as kubelets do.
	WatchList bool `json:"watchList"`
	// RecoverySeconds is from the moment every apiserver was down until every apiserver was
	// ready, every informer had been served again, and every probe call met its SLO for Settle;
	// 0 when it did not recover within the timeout. The other times count from the same moment.
	RecoverySeconds float64 `json:"recoverySeconds"`
	Recovered       bool    `json:"recovered"`
	// ReadySeconds and ReconnectedSeconds are when the apiservers answered /readyz and when the
	// last informer was served again; Refetched counts the informers that fetched their whole
	// state again (a watch resumed from its resource version needs none).
	ReadySeconds       float64 `json:"readySeconds"`
	ReconnectedSeconds float64 `json:"reconnectedSeconds"`
	Refetched          int     `json:"refetched"`
	// Streamed counts those whose state came again by a watch list, with no list after it (a
	// reflector falls back to a list when a watch list fails).
	Streamed int `json:"streamed"`
	// PeakMemoryBytes is each restarted apiserver's highest resident memory (VmHWM).
	PeakMemoryBytes map[string]int64 `json:"peakMemoryBytes"`
	// ProbeCalls and ProbeMisses count the SLO probe's calls from the apiservers' start until
	// recovery, and those that failed or missed their class's threshold.
	ProbeCalls  int `json:"probeCalls"`
	ProbeMisses int `json:"probeMisses"`
	// LastMiss is the last missed call: its class and error or latency.
	LastMiss string `json:"lastMiss,omitempty"`
	// Timeline is each round of the SLO probe after the restart, for restart.svg.
	Timeline []RestartRound `json:"timeline"`
}

// RestartRound is one round of the SLO probe during a restart storm.
type RestartRound struct {
	// Seconds count from the moment every apiserver was down.
	Seconds float64 `json:"seconds"`
	// SlowestShare is the round's slowest call ÷ its class's threshold: over 1, the round missed
	// (a failed call counts as 1 at least).
	SlowestShare float64 `json:"slowestShareOfSLO"`
	// Served is the share of the informers served again.
	Served float64 `json:"informersServed"`
}

// RestartRecoveryTarget is the goal: every SLO holds again within a minute.
const RestartRecoveryTarget = time.Minute

// clientGates switch WatchListClient for the informers this process starts: off but while a
// restart storm's informers start. Installed before any client is made, so client-go's
// KUBE_FEATURE_WatchListClient does not apply in a process that runs the benchmark.
var clientGates = func() *watchlist.Gates {
	g := watchlist.Install()
	g.Set(false)
	return g
}()

// restartStorms runs the restart storm with informers that list, as kubelets' do, then with
// informers that stream their initial state.
func (r *runner) restartStorms(ctx context.Context, nodes int) ([]RestartReport, error) {
	var out []RestartReport
	for _, watchList := range []bool{false, true} {
		rep, err := r.restartStorm(ctx, nodes, watchList)
		if err != nil {
			return out, err
		}
		out = append(out, rep)
	}
	return out, nil
}

// restartStorm starts the informers, waits for them to sync, restarts every apiserver at once
// and measures the recovery.
func (r *runner) restartStorm(ctx context.Context, nodes int, watchList bool) (RestartReport, error) {
	rep := RestartReport{Nodes: nodes, Informers: min(r.Restart.Informers, nodes), WatchList: watchList, PeakMemoryBytes: map[string]int64{}}
	r.logf("restart storm: %d informers (%s), then every apiserver restarted at once", rep.Informers, informerKind(watchList))
	fleet, err := r.startInformers(ctx, rep.Informers, watchList)
	defer fleet.stop()
	if err != nil {
		return rep, err
	}
	targets, err := r.cluster.Targets()
	if err != nil {
		return rep, err
	}
	down, restarted, err := r.cluster.RestartAPIServers(ctx)
	if err != nil {
		return rep, err
	}
	fleet.since.Store(down.UnixNano())
	deadline := down.Add(r.Restart.Timeout)
	wctx, stopWaiting := context.WithDeadline(ctx, deadline)
	defer stopWaiting()
	readyAt := make(chan time.Time, 1)
	go func() {
		for wctx.Err() == nil {
			if apiReady(wctx, targets) {
				readyAt <- time.Now()
				return
			}
			_ = sleep(wctx, 250*time.Millisecond)
		}
	}()
	probe := &sloProbe{load: r.load}
	defer probe.cleanUp(ctx)
	var ready, clean time.Time
	for time.Now().Before(deadline) {
		round := time.Now()
		select {
		case ready = <-readyAt:
		default:
		}
		slowest := probe.round(ctx)
		switch {
		case slowest > 1:
			clean = time.Time{}
		case clean.IsZero():
			clean = round
		}
		reconnected, all := fleet.servedAgain()
		rep.Timeline = append(rep.Timeline, RestartRound{Seconds: round.Sub(down).Seconds(), SlowestShare: slowest, Served: fleet.servedShare()})
		if !ready.IsZero() && all && !clean.IsZero() && time.Since(clean) >= r.Restart.Settle {
			rep.Recovered = true
			rep.RecoverySeconds = latest(ready, reconnected, clean).Sub(down).Seconds()
			break
		}
		if err := sleep(ctx, time.Second-time.Since(round)); err != nil {
			return rep, err
		}
	}
	rep.ProbeCalls, rep.ProbeMisses, rep.LastMiss = probe.calls, probe.misses, probe.lastMiss
	if !ready.IsZero() {
		rep.ReadySeconds = ready.Sub(down).Seconds()
	}
	if reconnected, all := fleet.servedAgain(); all {
		rep.ReconnectedSeconds = reconnected.Sub(down).Seconds()
	}
	rep.Refetched, rep.Streamed = fleet.refetched()
	for _, p := range restarted {
		rep.PeakMemoryBytes[p.Name] = procfs.PeakRSS(p.PID)
	}
	r.logf("%s", restartLine(rep))
	return rep, nil
}

// apiReady is whether every apiserver answers /readyz.
func apiReady(ctx context.Context, targets []Target) bool {
	for _, t := range targets {
		if t.Kind != KindAPIServer {
			continue
		}
		u, err := url.Parse(t.URL)
		if err != nil {
			return false
		}
		u.Path = "/readyz"
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, u.String(), nil)
		if err != nil {
			return false
		}
		resp, err := t.Client.Do(req)
		if err != nil {
			return false
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			return false
		}
	}
	return true
}

func latest(ts ...time.Time) time.Time {
	out := ts[0]
	for _, t := range ts[1:] {
		if t.After(out) {
			out = t
		}
	}
	return out
}

func informerKind(watchList bool) string {
	if watchList {
		return "watch list"
	}
	return "list and watch"
}

// informerFleet is a restart storm's kubelet-like informers, each watching its node's pods on a
// connection of its own.
type informerFleet struct {
	nodes   []*watchedNode
	clients []*http.Client
	cancel  context.CancelFunc
	running sync.WaitGroup
	// since is when the apiservers were all down (UnixNano): what each informer is served after
	// it counts as served again. Until then, never.
	since atomic.Int64
}

// watchedNode is one informer and the times (UnixNano) it was first served after the fleet's
// since, and last fetched its whole state by a list or a watch list.
type watchedNode struct {
	informer             cache.SharedIndexInformer
	firstServed          atomic.Int64
	lastList, lastStream atomic.Int64
	firstCall            sync.Once
}

// startInformers starts n informers with WatchListClient as watchList says and waits for them
// to sync; the gate is off again once each has made its first call, when its reflector has read it.
func (r *runner) startInformers(ctx context.Context, n int, watchList bool) (*informerFleet, error) {
	ictx, cancel := context.WithCancel(ctx)
	f := &informerFleet{cancel: cancel}
	f.since.Store(math.MaxInt64)
	cfg, err := r.cluster.LoadConfig()
	if err != nil {
		return f, err
	}
	var called sync.WaitGroup
	clientGates.Set(watchList)
	defer clientGates.Set(false)
	for i := range n {
		node, err := r.cluster.Node(i)
		if err != nil {
			return f, err
		}
		w, client, err := f.watch(cfg, node.Name, &called)
		if err != nil {
			return f, err
		}
		f.nodes, f.clients = append(f.nodes, w), append(f.clients, client)
		called.Add(1)
		f.running.Add(1)
		go func() { defer f.running.Done(); w.informer.RunWithContext(ictx) }()
	}
	called.Wait()
	clientGates.Set(false)
	synced := make([]cache.InformerSynced, len(f.nodes))
	for i, w := range f.nodes {
		synced[i] = w.informer.HasSynced
	}
	if !cache.WaitForCacheSync(ctx.Done(), synced...) {
		return f, fmt.Errorf("restart storm: the informers did not sync: %w", ctx.Err())
	}
	return f, nil
}

func (f *informerFleet) watch(base *rest.Config, node string, called *sync.WaitGroup) (*watchedNode, *http.Client, error) {
	cfg := rest.CopyConfig(base)
	cfg.QPS, cfg.Burst = -1, 0
	protobuf(cfg)
	separateConnection(cfg)
	client, err := rest.HTTPClientFor(cfg)
	if err != nil {
		return nil, nil, err
	}
	cs, err := kubernetes.NewForConfigAndClient(cfg, client)
	if err != nil {
		return nil, nil, err
	}
	w := &watchedNode{}
	served := func(at int64) {
		if at >= f.since.Load() {
			w.firstServed.CompareAndSwap(0, at)
		}
	}
	selector := fields.OneTermEqualSelector("spec.nodeName", node).String()
	lw := &cache.ListWatch{
		ListWithContextFunc: func(ctx context.Context, o metav1.ListOptions) (runtime.Object, error) {
			w.firstCall.Do(called.Done)
			o.FieldSelector = selector
			list, err := cs.CoreV1().Pods(metav1.NamespaceAll).List(ctx, o)
			if err == nil {
				now := time.Now().UnixNano()
				w.lastList.Store(now)
				served(now)
			}
			return list, err
		},
		WatchFuncWithContext: func(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) {
			w.firstCall.Do(called.Done)
			o.FieldSelector = selector
			wi, err := cs.CoreV1().Pods(metav1.NamespaceAll).Watch(ctx, o)
			if err == nil {
				now := time.Now().UnixNano()
				if o.SendInitialEvents != nil && *o.SendInitialEvents {
					w.lastStream.Store(now)
				}
				served(now)
			}
			return wi, err
		},
	}
	w.informer = cache.NewSharedIndexInformer(lw, &corev1.Pod{}, 0, cache.Indexers{})
	return w, client, nil
}

// servedAgain is when the last informer was first served after the restart, and whether all were.
func (f *informerFleet) servedAgain() (time.Time, bool) {
	var last int64
	for _, w := range f.nodes {
		at := w.firstServed.Load()
		if at == 0 {
			return time.Time{}, false
		}
		last = max(last, at)
	}
	return time.Unix(0, last), true
}

// servedShare is the share of the informers served again so far.
func (f *informerFleet) servedShare() float64 {
	served := 0
	for _, w := range f.nodes {
		if w.firstServed.Load() != 0 {
			served++
		}
	}
	return float64(served) / float64(max(len(f.nodes), 1))
}

// refetched counts the informers that fetched their whole state after the restart, and those
// whose last fetch was a watch list.
func (f *informerFleet) refetched() (fetched, streamed int) {
	since := f.since.Load()
	for _, w := range f.nodes {
		list, stream := w.lastList.Load(), w.lastStream.Load()
		if max(list, stream) >= since {
			fetched++
		}
		if stream >= since && stream > list {
			streamed++
		}
	}
	return fetched, streamed
}

// stop ends every informer and closes their connections.
func (f *informerFleet) stop() {
	f.cancel()
	f.running.Wait()
	for _, c := range f.clients {
		c.CloseIdleConnections()
	}
}

// restartProbeLabel marks the probe's ConfigMaps, so that any a failed delete left are removed.
const restartProbeLabel = "clusterforge.io/restart-probe"

// sloProbe makes one call of each SLO class a round, as the load's client, and counts the calls
// that failed or missed their class's threshold.
type sloProbe struct {
	load          *Load
	calls, misses int
	lastMiss      string
}

// missed is the least share of its threshold that a failed call counts as: just over 1.
var missed = math.Nextafter(1, 2)

// round is the round's slowest call ÷ its class's threshold: over 1 when a call missed its SLO.
func (p *sloProbe) round(ctx context.Context) float64 {
	node, err := p.load.cluster.Node(0)
	if err != nil {
		return missed
	}
	configMaps := p.load.cs.CoreV1().ConfigMaps(StormNamespace)
	calls := []struct {
		class Class
		call  func(context.Context) error
	}{
		{Mutating, func(ctx context.Context) error {
			cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{GenerateName: "restart-probe-", Labels: map[string]string{restartProbeLabel: "true"}}}
			made, err := configMaps.Create(ctx, cm, metav1.CreateOptions{})
			if err == nil {
				go func() { // not timed: the next round's create is
					dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Minute)
					defer cancel()
					_ = configMaps.Delete(dctx, made.Name, metav1.DeleteOptions{})
				}()
			}
			return err
		}},
		{ReadResource, func(ctx context.Context) error {
			_, err := p.load.cs.CoreV1().Nodes().Get(ctx, node.Name, metav1.GetOptions{})
			return err
		}},
		{ReadNamespace, func(ctx context.Context) error {
			_, err := p.load.cs.CoreV1().Pods(BaseNamespace).List(ctx, metav1.ListOptions{Limit: 500})
			return err
		}},
	}
	var wg sync.WaitGroup
	var mu sync.Mutex
	slowest := 0.0
	for _, c := range calls {
		wg.Add(1)
		go func() {
			defer wg.Done()
			cctx, cancel := context.WithTimeout(ctx, c.class.Threshold)
			defer cancel()
			began := time.Now()
			err := c.call(cctx)
			took := time.Since(began)
			share := took.Seconds() / c.class.Threshold.Seconds()
			if err != nil {
				share = max(share, missed)
			}
			mu.Lock()
			defer mu.Unlock()
			p.calls++
			slowest = max(slowest, share)
			if share > 1 {
				p.misses++
				p.lastMiss = fmt.Sprintf("%s after %.1f s: %v", c.class.Name, took.Seconds(), err)
			}
		}()
	}
	wg.Wait()
	return slowest
}

// cleanUp removes the probe's ConfigMaps that a failed delete left.
func (p *sloProbe) cleanUp(ctx context.Context) {
	_ = p.load.cs.CoreV1().ConfigMaps(StormNamespace).DeleteCollection(ctx, metav1.DeleteOptions{},
		metav1.ListOptions{LabelSelector: restartProbeLabel})
}
