package scale

import (
	"context"
	"fmt"
	"net/http"
	"net/url"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"

	"github.com/clusterforge/clusterforge/components/watchlist"
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
	// RecoverySeconds is from the restart until every apiserver was ready, every informer had
	// listed or watched again, and every probe call met its SLO for Settle; 0 when it did not
	// recover within the timeout.
	RecoverySeconds float64 `json:"recoverySeconds"`
	Recovered       bool    `json:"recovered"`
	// ReadySeconds and ReconnectedSeconds are when the apiservers answered /readyz and when the
	// last informer was served again; Refetched counts the informers that fetched their whole
	// state again (a watch resumed from its resource version needs none).
	ReadySeconds       float64 `json:"readySeconds"`
	ReconnectedSeconds float64 `json:"reconnectedSeconds"`
	Refetched          int     `json:"refetched"`
	// Streamed counts those whose state came again by a watch list.
	Streamed int `json:"streamed"`
	// PeakMemoryBytes is each restarted apiserver's highest resident memory (VmHWM).
	PeakMemoryBytes map[string]int64 `json:"peakMemoryBytes"`
	// ProbeCalls and ProbeMisses count the SLO probe's calls from the restart until recovery, and
	// those that failed or missed their class's threshold.
	ProbeCalls  int `json:"probeCalls"`
	ProbeMisses int `json:"probeMisses"`
	// LastMiss is the last missed call: its class and error or latency.
	LastMiss string `json:"lastMiss,omitempty"`
}

// clientGates switch WatchListClient for the informers this process starts; off unless a restart
// storm asks for it. Installed before any client is made.
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
	ictx, stopInformers := context.WithCancel(ctx)
	defer stopInformers()
	informers := make([]*watchedNode, rep.Informers)
	for n := range informers {
		node, err := r.cluster.Node(n)
		if err != nil {
			return rep, err
		}
		if informers[n], err = r.watchNode(node.Name); err != nil {
			return rep, err
		}
	}
	clientGates.Set(watchList)
	synced := make([]cache.InformerSynced, len(informers))
	for i, w := range informers {
		synced[i] = w.informer.HasSynced
		go w.informer.RunWithContext(ictx)
	}
	// Each reflector reads the gate when it starts, before its cache syncs.
	ok := cache.WaitForCacheSync(ctx.Done(), synced...)
	clientGates.Set(false)
	if !ok {
		return rep, fmt.Errorf("restart storm: the informers did not sync: %w", ctx.Err())
	}

	targets, err := r.cluster.Targets()
	if err != nil {
		return rep, err
	}
	killed := time.Now()
	restarted, err := r.cluster.RestartAPIServers(ctx)
	if err != nil {
		return rep, err
	}
	probe := newSLOProbe(r.load)
	deadline := killed.Add(r.Restart.Timeout)
	var ready, reconnected, clean time.Time
	for time.Now().Before(deadline) {
		round := time.Now()
		if ready.IsZero() && apiReady(ctx, targets) {
			ready = time.Now()
		}
		if reconnected.IsZero() && allServedSince(informers, killed) {
			reconnected = time.Now()
		}
		switch ok := probe.round(ctx); {
		case !ok:
			clean = time.Time{}
		case clean.IsZero():
			clean = round
		}
		if !ready.IsZero() && !reconnected.IsZero() && !clean.IsZero() && time.Since(clean) >= r.Restart.Settle {
			rep.Recovered = true
			rep.RecoverySeconds = latest(ready, reconnected, clean).Sub(killed).Seconds()
			break
		}
		if err := sleep(ctx, time.Second-time.Since(round)); err != nil {
			return rep, err
		}
	}
	rep.ProbeCalls, rep.ProbeMisses, rep.LastMiss = probe.calls, probe.misses, probe.lastMiss
	if !ready.IsZero() {
		rep.ReadySeconds = ready.Sub(killed).Seconds()
	}
	if !reconnected.IsZero() {
		rep.ReconnectedSeconds = reconnected.Sub(killed).Seconds()
	}
	for _, w := range informers {
		if w.fetchedSince(killed) {
			rep.Refetched++
		}
		if w.lastStream.Load() >= killed.UnixNano() {
			rep.Streamed++
		}
	}
	for _, p := range restarted {
		rep.PeakMemoryBytes[p.Name] = peakRSS(p.PID)
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

// watchedNode is one kubelet-like informer: its node's pods, on a connection of its own.
type watchedNode struct {
	informer cache.SharedIndexInformer
	// lastList, lastStream and lastWatch are the UnixNano times of the last successful list,
	// watch list and watch: the first two fetch the whole state.
	lastList, lastStream, lastWatch atomic.Int64
}

func (w *watchedNode) fetchedSince(t time.Time) bool {
	return max(w.lastList.Load(), w.lastStream.Load()) >= t.UnixNano()
}

func allServedSince(ws []*watchedNode, t time.Time) bool {
	for _, w := range ws {
		if w.lastWatch.Load() < t.UnixNano() {
			return false
		}
	}
	return true
}

func informerKind(watchList bool) string {
	if watchList {
		return "watch list"
	}
	return "list and watch"
}

func (r *runner) watchNode(node string) (*watchedNode, error) {
	cfg, err := r.cluster.LoadConfig()
	if err != nil {
		return nil, err
	}
	cfg.QPS, cfg.Burst = -1, 0
	protobuf(cfg)
	// A Proxy function keeps client-go from sharing one cached transport between them.
	cfg.Proxy = func(*http.Request) (*url.URL, error) { return nil, nil }
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return nil, err
	}
	w := &watchedNode{}
	selector := fields.OneTermEqualSelector("spec.nodeName", node).String()
	lw := &cache.ListWatch{
		ListWithContextFunc: func(ctx context.Context, o metav1.ListOptions) (runtime.Object, error) {
			o.FieldSelector = selector
			list, err := cs.CoreV1().Pods(metav1.NamespaceAll).List(ctx, o)
			if err == nil {
				w.lastList.Store(time.Now().UnixNano())
				w.lastWatch.Store(time.Now().UnixNano())
			}
			return list, err
		},
		WatchFuncWithContext: func(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) {
			o.FieldSelector = selector
			wi, err := cs.CoreV1().Pods(metav1.NamespaceAll).Watch(ctx, o)
			if err == nil {
				w.lastWatch.Store(time.Now().UnixNano())
				if o.SendInitialEvents != nil && *o.SendInitialEvents {
					w.lastStream.Store(time.Now().UnixNano())
				}
			}
			return wi, err
		},
	}
	w.informer = cache.NewSharedIndexInformer(lw, &corev1.Pod{}, 0, cache.Indexers{})
	return w, nil
}

// sloProbe makes one call of each SLO class a round, as the load's client, and counts the calls
// that failed or missed their class's threshold.
type sloProbe struct {
	load          *Load
	calls, misses int
	lastMiss      string
}

func newSLOProbe(l *Load) *sloProbe { return &sloProbe{load: l} }

// round reports whether every call of the round met its SLO.
func (p *sloProbe) round(ctx context.Context) bool {
	node, err := p.load.cluster.Node(0)
	if err != nil {
		return false
	}
	calls := []struct {
		class Class
		call  func(context.Context) error
	}{
		{Mutating, func(ctx context.Context) error {
			cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{GenerateName: "restart-probe-"}}
			made, err := p.load.cs.CoreV1().ConfigMaps(StormNamespace).Create(ctx, cm, metav1.CreateOptions{})
			if err == nil {
				err = p.load.cs.CoreV1().ConfigMaps(StormNamespace).Delete(ctx, made.Name, metav1.DeleteOptions{})
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
	ok := true
	for _, c := range calls {
		wg.Add(1)
		go func() {
			defer wg.Done()
			cctx, cancel := context.WithTimeout(ctx, c.class.Threshold)
			defer cancel()
			began := time.Now()
			err := c.call(cctx)
			mu.Lock()
			defer mu.Unlock()
			p.calls++
			if took := time.Since(began); err != nil || took > c.class.Threshold {
				p.misses++
				ok = false
				p.lastMiss = fmt.Sprintf("%s after %.1f s: %v", c.class.Name, took.Seconds(), err)
			}
		}()
	}
	wg.Wait()
	return ok
}

// peakRSS is a process's highest resident memory so far (VmHWM), in bytes; 0 if unreadable.
func peakRSS(pid int) int64 {
	status, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0
	}
	for _, line := range strings.Split(string(status), "\n") {
		if v, ok := strings.CutPrefix(line, "VmHWM:"); ok {
			kib, _ := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
			return kib << 10
		}
	}
	return 0
}
