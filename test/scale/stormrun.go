package scale

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"math"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"time"

	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/clusterforge/clusterforge/test/etcdprobe"
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
	// HoursToQuota is how long the main etcd's database would take to reach its quota growing as
	// it did in the storm phase (0: it did not grow).
	HoursToQuota float64 `json:"hoursToQuota"`
	// Invalid says why the run does not count: the generator offered less than StormReachedShare
	// of the rate, or the probe measured nothing. Empty for a valid run.
	Invalid string `json:"invalid,omitempty"`
}

// ProbeFile is the storm's write probe's record in the report's directory: every write, a line of
// JSON each (etcdprobe.Sample).
const ProbeFile = "probe.jsonl"

// StormReachedShare is the share of its rate a storm must offer for a run to count, and reach
// for a calibration level to count as reached.
const StormReachedShare = 0.9

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
	// SentPerSecond is what the generator offered, Unsent what it could not; EventsPerSecond is
	// what the apiservers created, Throttled and Failed what they refused.
	SentPerSecond   float64 `json:"sentPerSecond"`
	Unsent          int64   `json:"unsent"`
	EventsPerSecond float64 `json:"eventsPerSecond"`
	Throttled       int64   `json:"throttled429"`
	Failed          int64   `json:"failed"`
	// DBSizeBytes is the main etcd's largest member database at the phase's end, QuotaBytes its
	// quota, DBGrowthBytesPerSecond the growth over the phase.
	DBSizeBytes            float64 `json:"dbSizeBytes"`
	QuotaBytes             float64 `json:"quotaBytes"`
	DBGrowthBytesPerSecond float64 `json:"dbGrowthBytesPerSecond"`
}

// Point is one point of a series.
type Point struct {
	X float64 `json:"x"`
	Y float64 `json:"y"`
}

// RatioStats are one arm's valid runs: their probe ratios' median, mean and the mean's 95 %
// confidence interval (Student's t; none for fewer than two runs), and the main etcd's median
// hours to quota.
type RatioStats struct {
	Runs         int         `json:"runs"`
	Invalid      int         `json:"invalidRuns"`
	Median       float64     `json:"median"`
	Mean         float64     `json:"mean"`
	CI95         *[2]float64 `json:"ci95"`
	HoursToQuota float64     `json:"hoursToQuota"`
}

// Ratios are the split and unsplit arms' statistics.
func (s StormReport) Ratios() map[string]RatioStats {
	ratios, hours, invalid := map[string][]float64{}, map[string][]float64{}, map[string]int{}
	for _, r := range s.Runs {
		key := "unsplit"
		if r.Split {
			key = "split"
		}
		if r.Invalid != "" {
			invalid[key]++
			continue
		}
		ratios[key], hours[key] = append(ratios[key], r.ProbeRatio), append(hours[key], r.HoursToQuota)
	}
	out := map[string]RatioStats{}
	for _, key := range []string{"split", "unsplit"} {
		v := ratios[key]
		st := RatioStats{Runs: len(v), Invalid: invalid[key], Median: zeroNaN(median(v)), HoursToQuota: medianHours(hours[key])}
		if len(v) > 0 {
			st.Mean = mean(v)
		}
		if len(v) > 1 {
			var squares float64
			for _, x := range v {
				squares += (x - st.Mean) * (x - st.Mean)
			}
			half := tQuantile975(len(v)-1) * math.Sqrt(squares/float64(len(v)-1)/float64(len(v)))
			st.CI95 = &[2]float64{st.Mean - half, st.Mean + half}
		}
		out[key] = st
	}
	return out
}

// medianHours is the median time to quota, where 0 is never; 0 again if the median is never.
func medianHours(hours []float64) float64 {
	if len(hours) == 0 {
		return 0
	}
	v := make([]float64, len(hours))
	for i, h := range hours {
		v[i] = h
		if h <= 0 {
			v[i] = math.Inf(1)
		}
	}
	slices.Sort(v)
	m := v[len(v)/2]
	if len(v)%2 == 0 {
		m = (v[len(v)/2-1] + m) / 2 // Inf if either is never
	}
	if math.IsInf(m, 1) {
		return 0
	}
	return m
}

func mean(v []float64) float64 {
	var sum float64
	for _, x := range v {
		sum += x
	}
	return sum / float64(len(v))
}

// tQuantile975 is Student's t distribution's 97.5th percentile for df degrees of freedom.
func tQuantile975(df int) float64 {
	table := []float64{12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306, 2.262, 2.228}
	if df <= len(table) {
		return table[df-1]
	}
	return 1.96 + 2.5/float64(df) // within 1 % of the exact value past ten
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
		oneDialAtATime(cfg)
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

// oneDialAtATime keeps a client from dialing while it has a dial under way: its requests wait
// for that connection and share it (HTTP/2), as a kubelet's do. Without it every request sent
// during a TLS handshake dials one of its own, and an open-loop storm at a capped apiserver,
// whose handshakes are slow, opened thousands of connections and ran the load balancer out of
// file descriptors.
// The transport it changes is the client's own only because separateConnection keeps client-go
// from sharing a cached one.
func oneDialAtATime(cfg *rest.Config) {
	earlier := cfg.WrapTransport
	cfg.WrapTransport = func(rt http.RoundTripper) http.RoundTripper {
		t, ok := rt.(*http.Transport)
		if !ok {
			return failing{fmt.Errorf("storm client: cannot limit the dials of a %T", rt)}
		}
		t.MaxConnsPerHost = 1
		if earlier != nil {
			return earlier(t)
		}
		return t
	}
}

// failing is a transport that sends nothing: a client that would not be what it claims.
type failing struct{ err error }

func (f failing) RoundTrip(*http.Request) (*http.Response, error) { return nil, f.err }

// storm calibrates the storm's rate on the unsplit cluster, then runs quiet, storm and recovery
// split and unsplit, Rounds times interleaved (A/B/A/B), and leaves the cluster split again.
func (r *runner) storm(ctx context.Context, nodes int) (rep StormReport, err error) {
	rep = StormReport{Nodes: nodes}
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
	samples := filepath.Join(r.Out, ProbeFile)
	if err := os.Remove(samples); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return rep, err
	}
	stopProbe, err := r.cluster.StartProbe(samples)
	if err != nil {
		return rep, err
	}
	probe := etcdprobe.Read(samples)
	defer func() {
		// The runs are measured: a probe that failed on the way is said in the report, not
		// allowed to discard them.
		if perr := errors.Join(stopProbe(), probe.Err()); perr != nil {
			r.logf("storm: the write probe: %v", perr)
			rep.Note += "; the write probe failed: " + perr.Error()
		}
	}()
	start := func(rate float64) (*Storm, context.CancelFunc) {
		sctx, cancel := context.WithCancel(ctx)
		return StartStorm(sctx, clients, rate, names), cancel
	}

	r.logf("storm: calibrating on the unsplit cluster (%d nodes), from %.0f events/s", nodes, r.Storm.StartRate)
	if err := r.cluster.SplitEvents(ctx, false); err != nil {
		return rep, err
	}
	if err := sleep(ctx, r.Storm.Settle); err != nil {
		return rep, err
	}
	quietFrom := time.Now().Add(-r.Storm.Level)
	quiet := P99(probe.Between(quietFrom, time.Now()))
	reached := 0.0 // the highest level the storm reached
	for rate := r.Storm.StartRate; ; {
		s, stop := start(rate)
		began := time.Now()
		err := sleep(ctx, r.Storm.Level)
		stop()
		if err != nil {
			return rep, err
		}
		created, throttled, _ := s.Counts()
		p99 := P99(probe.Between(began.Add(r.Storm.Level/3), time.Now()))
		if math.IsNaN(p99) { // no write even started: each waited out the level
			p99 = r.Storm.Level.Seconds()
		}
		level := StormLevel{Target: rate, Achieved: float64(created) / time.Since(began).Seconds(), ProbeP99: p99, QuietP99: quiet, Throttled: throttled}
		rep.Calibration = append(rep.Calibration, level)
		_, unsent := s.Offered()
		r.logf("  %.0f events/s asked, %.0f created a second (%d throttled, %d not sent): probe p99 %.1f ms, quiet %.1f ms",
			rate, level.Achieved, throttled, unsent, 1e3*level.ProbeP99, 1e3*quiet)
		next := rate * 1.5
		// A level the apiservers did not take counts for nothing, however the probe fared: the
		// degradation must come from a storm that happened.
		short := level.Achieved < StormReachedShare*rate
		switch {
		case short && reached == 0 && rate/2 >= r.Storm.StartRate/32:
			next = rate / 2 // nothing reached yet: lower
		case short:
			rep.Note = fmt.Sprintf("the storm reached only %.0f of %.0f events/s (throttled %d; probe p99 ×%.1f): the apiservers and this machine cap it there", level.Achieved, rate, throttled, level.ProbeP99/quiet)
		case level.ProbeP99 >= r.Storm.Degraded*quiet:
			reached = rate
			rep.Note = fmt.Sprintf("the unsplit main etcd degraded (probe p99 ×%.1f) at %.0f events/s", level.ProbeP99/quiet, rate)
		case next > r.Storm.MaxRate:
			reached = rate
			rep.Note = fmt.Sprintf("the main etcd had not degraded ×%.1f at %.0f events/s, the most the benchmark asks", r.Storm.Degraded, rate)
		default:
			reached = rate
		}
		if rep.Note != "" {
			break
		}
		if err := sleep(ctx, r.Storm.Level/3); err != nil { // let the last level drain
			return rep, err
		}
		rate = next
	}
	// The runs use the highest rate the storm reached; if none was, the lowest tried, and the
	// runs come out invalid.
	rep.Rate = reached
	if reached == 0 {
		rep.Rate = rep.Calibration[len(rep.Calibration)-1].Target
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
			r.logf("  %s: probe p99 storm ÷ quiet = %.2f (fsync %.2f, commit %.2f); main etcd at quota in %.1f h%s", name, run.ProbeRatio, run.FsyncRatio, run.CommitRatio,
				run.HoursToQuota, map[bool]string{true: "; INVALID: " + run.Invalid}[run.Invalid != ""])
		}
	}
	return rep, r.cluster.SplitEvents(ctx, true)
}

// stormRun is one run: the apiservers set split or unsplit, then quiet, storm and recovery.
func (r *runner) stormRun(ctx context.Context, name string, split bool, probe *etcdprobe.Reader,
	start func(float64) (*Storm, context.CancelFunc), rate float64) (StormRun, error) {
	run := StormRun{Name: name, Split: split}
	r.logf("storm run %s", name)
	if err := r.cluster.SplitEvents(ctx, split); err != nil {
		return run, err
	}
	if err := sleep(ctx, r.Storm.Settle); err != nil {
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
		probe.Through(ctx, ended)
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
			sent, unsent := s.Offered()
			p.EventsPerSecond, p.Throttled, p.Failed = float64(created)/p.Seconds, throttled, failed
			p.SentPerSecond, p.Unsent = float64(sent)/p.Seconds, unsent
		}
		p.DBSizeBytes, p.QuotaBytes = maxOf(after, DBSizeMetric), maxOf(after, QuotaMetric)
		p.DBGrowthBytesPerSecond = (p.DBSizeBytes - maxOf(before, DBSizeMetric)) / p.Seconds
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
	if storm.DBGrowthBytesPerSecond > 0 && storm.QuotaBytes > 0 {
		run.HoursToQuota = (storm.QuotaBytes - storm.DBSizeBytes) / storm.DBGrowthBytesPerSecond / 3600
	}
	// Invalid when this machine did not offer the load; the cluster's 429s and latency are results.
	switch {
	case storm.SentPerSecond < StormReachedShare*rate:
		run.Invalid = fmt.Sprintf("the generator sent %.0f of %.0f events/s", storm.SentPerSecond, rate)
	case quiet.Probes == 0 || storm.Probes == 0:
		run.Invalid = "the probe wrote nothing in a phase"
	}
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

// maxOf is the largest value of a gauge over every member scraped (0 for none).
func maxOf(samples []Sample, metric string) float64 {
	out := 0.0
	for _, x := range samples {
		if x.Name == metric {
			out = math.Max(out, x.Value)
		}
	}
	return out
}
