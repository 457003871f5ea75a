package scale

import (
	"context"
	"fmt"
	"math"
	"net/http"
	"net/url"
	"time"

	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
)

// StormReport is the event storm's result (storm.json): the rate it calibrated and each run's
// phases, split (A) and unsplit (B) interleaved.
type StormReport struct {
	Nodes int `json:"nodes"`
	// Rate is the storm's rate in events a second, from Calibration; Note says why it stopped there.
	Rate        float64      `json:"eventsPerSecond"`
	Note        string       `json:"note"`
	Calibration []StormLevel `json:"calibration"`
	Runs        []StormRun   `json:"runs"`
}

// StormLevel is one calibration level, on the unsplit cluster.
type StormLevel struct {
	Target   float64 `json:"targetPerSecond"`
	Achieved float64 `json:"achievedPerSecond"`
	// ProbeP99 is the main etcd write probe's p99 at this level, QuietP99 before the storm (seconds).
	ProbeP99  float64 `json:"probeP99Seconds"`
	QuietP99  float64 `json:"quietP99Seconds"`
	Throttled int64   `json:"throttled429"`
}

// StormRun is one quiet-storm-recovery run.
type StormRun struct {
	Name   string       `json:"name"`
	Split  bool         `json:"split"`
	Phases []StormPhase `json:"phases"`
	// Series is the probe's p99 per ScrapeEvery window, from the run's start.
	Series []Point `json:"series"`
	// ProbeRatio, FsyncRatio and CommitRatio are the storm's p99 ÷ the quiet phase's.
	ProbeRatio  float64 `json:"probeRatio"`
	FsyncRatio  float64 `json:"walFsyncRatio"`
	CommitRatio float64 `json:"backendCommitRatio"`
}

// StormPhase is one phase of a run, measured on the main etcd.
type StormPhase struct {
	Name    string  `json:"name"`
	Seconds float64 `json:"seconds"`
	// Probes counts the probe's writes, ProbeFailures those that failed or timed out.
	Probes        int `json:"probes"`
	ProbeFailures int `json:"probeFailures"`
	// ProbeP50 and ProbeP99 are the write probe's; FsyncP99 and CommitP99 the main etcd members'
	// histograms summed (seconds).
	ProbeP50  float64 `json:"probeP50Seconds"`
	ProbeP99  float64 `json:"probeP99Seconds"`
	FsyncP99  float64 `json:"walFsyncP99Seconds"`
	CommitP99 float64 `json:"backendCommitP99Seconds"`
	// EventsPerSecond is what the storm achieved; Throttled and Failed its refused events.
	EventsPerSecond float64 `json:"eventsPerSecond"`
	Throttled       int64   `json:"throttled429"`
	Failed          int64   `json:"failed"`
}

// Point is one point of a series.
type Point struct {
	X float64 `json:"x"`
	Y float64 `json:"y"`
}

// Ratios are the median probe ratios of the split and unsplit runs.
func (s StormReport) Ratios() map[string]float64 {
	by := map[string][]float64{}
	for _, r := range s.Runs {
		key := "unsplit"
		if r.Split {
			key = "split"
		}
		by[key] = append(by[key], r.ProbeRatio)
	}
	return map[string]float64{"split": zeroNaN(median(by["split"])), "unsplit": zeroNaN(median(by["unsplit"]))}
}

// stormClients are separate connections as the nodes' identity, without a client-side rate
// limit: client-go multiplexes one client's requests over one HTTP/2 connection, which the load
// balancer gives to a single apiserver, and many nodes' events reach every apiserver.
func (r *runner) stormClients(n int) ([]*kubernetes.Clientset, error) {
	var out []*kubernetes.Clientset
	for range n {
		cfg, err := r.cluster.NodeConfig()
		if err != nil {
			return nil, err
		}
		cfg.QPS = -1
		protobuf(cfg)
		separateConnection(cfg)
		cs, err := kubernetes.NewForConfig(cfg)
		if err != nil {
			return nil, err
		}
		out = append(out, cs)
	}
	return out, nil
}

// separateConnection keeps client-go from sharing one cached transport, and so one connection,
// between clients of the same config.
func separateConnection(cfg *rest.Config) {
	cfg.Proxy = func(*http.Request) (*url.URL, error) { return nil, nil }
}

// storm calibrates the storm's rate on the unsplit cluster, then runs quiet, storm and recovery
// split and unsplit, Rounds times interleaved (A/B/A/B), and leaves the cluster split again.
func (r *runner) storm(ctx context.Context, nodes int) (StormReport, error) {
	rep := StormReport{Nodes: nodes}
	clients, err := r.stormClients(4)
	if err != nil {
		return rep, err
	}
	var names []string
	for n := range min(nodes, 1000) {
		node, err := r.cluster.Node(n)
		if err != nil {
			return rep, err
		}
		names = append(names, node.Name)
	}
	etcd, err := r.cluster.MainEtcd()
	if err != nil {
		return rep, err
	}
	defer etcd.Close()
	probeCtx, stopProbe := context.WithCancel(ctx)
	defer stopProbe()
	probe := StartProbe(probeCtx, etcd)
	start := func(rate float64) (*Storm, context.CancelFunc) {
		sctx, cancel := context.WithCancel(ctx)
		return StartStorm(sctx, clients, rate, names), cancel
	}

	r.logf("storm: calibrating on the unsplit cluster (%d nodes), from %.0f events/s", nodes, r.Storm.StartRate)
	if err := r.cluster.SplitEvents(ctx, false); err != nil {
		return rep, err
	}
	if err := sleep(ctx, r.Storm.Level); err != nil {
		return rep, err
	}
	quietFrom := time.Now().Add(-r.Storm.Level)
	quiet := P99(probe.Between(quietFrom, time.Now()))
	for rate := r.Storm.StartRate; ; rate *= 1.5 {
		s, stop := start(rate)
		began := time.Now()
		err := sleep(ctx, r.Storm.Level)
		stop()
		if err != nil {
			return rep, err
		}
		created, throttled, _ := s.Counts()
		level := StormLevel{Target: rate, Achieved: float64(created) / time.Since(began).Seconds(),
			ProbeP99: P99(probe.Between(began.Add(r.Storm.Level/3), time.Now())), QuietP99: quiet, Throttled: throttled}
		rep.Calibration = append(rep.Calibration, level)
		rep.Rate = rate
		r.logf("  %.0f events/s asked, %.0f created a second (%d throttled): probe p99 %.1f ms, quiet %.1f ms",
			rate, level.Achieved, throttled, 1e3*level.ProbeP99, 1e3*quiet)
		switch {
		case level.ProbeP99 >= r.Storm.Degraded*quiet:
			rep.Note = fmt.Sprintf("the unsplit main etcd degraded (probe p99 ×%.1f) at %.0f events/s", level.ProbeP99/quiet, rate)
		case level.Achieved < 0.7*rate:
			rep.Note = fmt.Sprintf("the storm reached only %.0f of %.0f events/s (throttled %d): the apiservers and this machine cap it before the main etcd degraded ×%.1f", level.Achieved, rate, throttled, r.Storm.Degraded)
		case rate*1.5 > r.Storm.MaxRate:
			rep.Note = fmt.Sprintf("the main etcd had not degraded ×%.1f at %.0f events/s, the most the benchmark asks", r.Storm.Degraded, rate)
		default:
			if err := sleep(ctx, r.Storm.Level/3); err != nil { // let the last level drain
				return rep, err
			}
			continue
		}
		break
	}
	r.logf("storm: %s; the runs use %.0f events/s", rep.Note, rep.Rate)

	for round := 1; round <= r.Storm.Rounds; round++ {
		for _, split := range []bool{true, false} {
			name := fmt.Sprintf("A%d split", round)
			if !split {
				name = fmt.Sprintf("B%d unsplit", round)
			}
			run, err := r.stormRun(ctx, name, split, probe, start, rep.Rate)
			if err != nil {
				return rep, err
			}
			rep.Runs = append(rep.Runs, run)
			r.logf("  %s: probe p99 storm ÷ quiet = %.2f (fsync %.2f, commit %.2f)", name, run.ProbeRatio, run.FsyncRatio, run.CommitRatio)
		}
	}
	return rep, r.cluster.SplitEvents(ctx, true)
}

// stormRun is one run: the apiservers set split or unsplit, then quiet, storm and recovery.
func (r *runner) stormRun(ctx context.Context, name string, split bool, probe *Probe,
	start func(float64) (*Storm, context.CancelFunc), rate float64) (StormRun, error) {
	run := StormRun{Name: name, Split: split}
	r.logf("storm run %s", name)
	if err := r.cluster.SplitEvents(ctx, split); err != nil {
		return run, err
	}
	targets, err := r.cluster.Targets()
	if err != nil {
		return run, err
	}
	runStart := time.Now()
	for _, phase := range []struct {
		name  string
		took  time.Duration
		storm bool
	}{{"quiet", r.Storm.Quiet, false}, {"storm", r.Storm.Storm, true}, {"recovery", r.Storm.Recovery, false}} {
		before, err := scrapeAll(ctx, targets, KindEtcdMain, EtcdMetrics)
		if err != nil {
			return run, err
		}
		began := time.Now()
		var s *Storm
		stop := func() {}
		if phase.storm {
			s, stop = start(rate)
		}
		err = sleep(ctx, phase.took)
		stop()
		if err != nil {
			return run, err
		}
		ended := time.Now()
		after, err := scrapeAll(ctx, targets, KindEtcdMain, EtcdMetrics)
		if err != nil {
			return run, err
		}
		samples := probe.Between(began, ended)
		p := StormPhase{Name: phase.name, Seconds: ended.Sub(began).Seconds(), Probes: len(samples),
			ProbeP99: zeroNaN(P99(samples)), FsyncP99: etcdP99(before, after, WALFsyncMetric), CommitP99: etcdP99(before, after, BackendCommitMetric)}
		secs := make([]float64, len(samples))
		for i, x := range samples {
			secs[i] = x.Latency.Seconds()
			if x.Failed {
				p.ProbeFailures++
			}
		}
		p.ProbeP50 = zeroNaN(QuantileOverTime(0.5, secs))
		if s != nil {
			created, throttled, failed := s.Counts()
			p.EventsPerSecond, p.Throttled, p.Failed = float64(created)/p.Seconds, throttled, failed
		}
		run.Phases = append(run.Phases, p)
		r.logf("  %s %s: probe p99 %.1f ms, fsync p99 %.1f ms, commit p99 %.1f ms%s", name, phase.name,
			1e3*p.ProbeP99, 1e3*p.FsyncP99, 1e3*p.CommitP99, map[bool]string{true: fmt.Sprintf(", %.0f events/s", p.EventsPerSecond)}[phase.storm])
	}
	for from := runStart; !from.Add(r.ScrapeEvery).After(time.Now()); from = from.Add(r.ScrapeEvery) {
		if q := P99(probe.Between(from, from.Add(r.ScrapeEvery))); !math.IsNaN(q) {
			run.Series = append(run.Series, Point{X: from.Sub(runStart).Seconds(), Y: q})
		}
	}
	quiet, storm := run.Phases[0], run.Phases[1]
	run.ProbeRatio, run.FsyncRatio, run.CommitRatio = ratio(storm.ProbeP99, quiet.ProbeP99), ratio(storm.FsyncP99, quiet.FsyncP99), ratio(storm.CommitP99, quiet.CommitP99)
	return run, nil
}

// etcdP99 is the p99 of a histogram over every main etcd member between two scrapes.
func etcdP99(before, after []Sample, metric string) float64 {
	all := func(map[string]string) (string, bool) { return "", true }
	return zeroNaN(Histograms(after, metric, all)[""].Since(Histograms(before, metric, all)[""]).Quantile(0.99))
}

func ratio(a, b float64) float64 {
	if b == 0 {
		return 0
	}
	return a / b
}
