package scale

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"math"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"time"
)

// Options shape a benchmark run. DefaultOptions are the run `make bench-scale` does; LongOptions
// hold each step and storm phase as long as the SLOs are defined over.
type Options struct {
	// Out is the report directory, build/bench/scale.
	Out string
	// Steps are the node counts of the ramp, in order; the ramp stops at the first failing step
	// (the lease-only run goes through every step).
	Steps []int
	// WarmUp is discarded after each step's set-up; Hold is what the step is judged on.
	WarmUp, Hold time.Duration
	// ScrapeEvery is how often the apiservers' metrics are read during a hold (clusterloader2: 5 s).
	ScrapeEvery time.Duration
	// ChurnPerSecond is the steady rate of pods the client creates (and deletes once running).
	ChurnPerSecond float64
	// NodeQPS bounds how fast nodes register (and deregister), as smooth joins do (L11).
	NodeQPS int
	// PodImage is what every pod names (KWOK runs none).
	PodImage string
	// RampPastFailure goes on to the next step after a failing one: for a smoke run, which checks the
	// benchmark's outputs, not this machine's SLOs. The benchmark itself stops at the first failure.
	RampPastFailure bool
	// UnderDriven is a step (its node count) whose get-node reader is offered 10,000 calls a
	// second, more than its bounded calls in flight deliver: the smoke run's proof that a short
	// load marks its step harness-limited. 0: none.
	UnderDriven int
	Storm       StormOptions
	Restart     RestartOptions
	// LeasesOnly is the lease-only microbenchmark: the nodes and their heartbeats alone (no base
	// pods, churn or reads), each step's cost per component whether or not it held the SLOs, and
	// no storms.
	LeasesOnly bool
	// Commit is the commit measured, for the published figures.
	Commit string
	// Topology names the control plane's shape for the report; CPULimits are the cores each
	// role was capped at, if any (the cluster applies them, the report states them).
	Topology  string
	CPULimits map[string]float64
	// EtcdFsyncLatency is each etcd member's disk flush when each has a disk stand-in of its own
	// (the cluster mounts them, the report states it); 0: they share this machine's disk.
	EtcdFsyncLatency time.Duration
}

// StormOptions shape the event storm.
type StormOptions struct {
	// Nodes is the node count the storm runs at; 0 is the largest passing step (or the last tried).
	Nodes int
	// Settle is waited after every apiserver restart (the split and unsplit runs restart them),
	// so that no phase measures the relists that follow one. Quiet, Storm and Recovery are the
	// phases of each run; Rounds the A/B pairs (split, unsplit).
	Settle, Quiet, Storm, Recovery time.Duration
	Rounds                         int
	// StartRate is the first calibration rate (events a second), raised by half each Level until
	// the unsplit main etcd's probe p99 reaches Degraded times its quiet p99, MaxRate is reached or
	// the storm no longer reaches its rate (halved instead while no level has reached it).
	StartRate, MaxRate float64
	Level              time.Duration
	Degraded           float64
}

// DefaultOptions is `make bench-scale`'s run. Each hold spans 10 one-minute windows, two node
// status periods and the backup and compaction cycles (3 and 5 minutes) that decide close steps.
func DefaultOptions(out string) Options {
	return Options{Out: out, Steps: []int{500, 1000, 2500, 5000, 7500, 10000},
		WarmUp: time.Minute, Hold: 10 * time.Minute, ScrapeEvery: 5 * time.Second, ChurnPerSecond: 5, NodeQPS: 100,
		Storm: StormOptions{Settle: 2 * time.Minute, Quiet: time.Minute, Storm: time.Minute, Recovery: time.Minute, Rounds: 5,
			StartRate: 1000, MaxRate: 16000, Level: 30 * time.Second, Degraded: 2},
		Restart: RestartOptions{Informers: 1000, Settle: 30 * time.Second, Timeout: 10 * time.Minute}}
}

// LongOptions holds each step 20 minutes and each storm phase 10, as the full run asks.
func LongOptions(out string) Options {
	o := DefaultOptions(out)
	o.WarmUp, o.Hold = 2*time.Minute, 20*time.Minute
	o.Storm.Quiet, o.Storm.Storm, o.Storm.Recovery = 10*time.Minute, 10*time.Minute, 10*time.Minute
	return o
}

// runner is one benchmark run.
type runner struct {
	Options
	cluster  Cluster
	load     *Load
	progress io.Writer
}

// Run ramps the cluster's nodes through the steps, judging each hold against the SLOs, then runs
// the event storm split and unsplit and the apiserver restart storm; it writes every report into o.Out as it goes and returns the
// summary.
func Run(ctx context.Context, c Cluster, stack string, o Options, progress io.Writer) (Summary, error) {
	if len(o.Steps) == 0 {
		return Summary{}, errors.New("scale: no steps to ramp through")
	}
	began := time.Now()
	summary := Summary{Stack: stack, Topology: o.Topology, CPULimits: o.CPULimits, Machine: ThisMachine(o.Out), Started: began, LeasesOnly: o.LeasesOnly}
	if o.EtcdFsyncLatency > 0 {
		summary.EtcdFsyncLatency = o.EtcdFsyncLatency.String()
	}
	if err := os.MkdirAll(o.Out, 0o755); err != nil {
		return summary, err
	}
	load, err := NewLoad(ctx, c, o.PodImage, progress)
	if err != nil {
		return summary, err
	}
	load.NodesOnly = o.LeasesOnly
	r := &runner{Options: o, cluster: c, load: load, progress: progress}
	loadCtx, stopLoad := context.WithCancel(ctx)
	defer stopLoad()
	if !o.LeasesOnly {
		load.Run(loadCtx, o.ChurnPerSecond)
	}

	var steps []Step
	have := 0 // the rehearsal's own nodes of the pool get their base pods too
	for i, nodes := range o.Steps {
		r.logf("step %d of %d: %d nodes", i+1, len(o.Steps), nodes)
		st := r.step(ctx, have, nodes)
		have = nodes
		steps = append(steps, st)
		if err := r.writeStep(st); err != nil {
			return summary, err
		}
		if !st.Passed() {
			r.logf("step %d nodes %s: %v", nodes, st.Result(), slices.Concat(st.HarnessLimited, st.Failing))
			if !r.RampPastFailure && !r.LeasesOnly { // the lease-only run measures cost at every step
				break
			}
			continue
		}
		r.logf("step %d nodes passed", nodes)
	}
	summary.Summarize(steps)
	if err := ctx.Err(); err != nil {
		return summary, err
	}
	if o.LeasesOnly {
		return summary, r.finish(&summary, steps, StormReport{}, nil)
	}

	stormNodes := o.Storm.Nodes
	if stormNodes == 0 {
		stormNodes = max(summary.LargestPassingNodes, steps[0].Nodes)
	}
	if stormNodes != have {
		r.logf("storm at %d nodes: from %d", stormNodes, have)
		if err := load.SetNodes(ctx, have, stormNodes, o.NodeQPS); err != nil {
			return summary, err
		}
	}
	storm, err := r.storm(ctx, stormNodes)
	if err != nil {
		return summary, err
	}
	if err := writeJSON(filepath.Join(o.Out, "storm.json"), storm); err != nil {
		return summary, err
	}
	summary.StormNodes, summary.StormEventsPerSecond = stormNodes, storm.Rate
	summary.StormRatio = storm.Ratios()
	restart, err := r.restartStorms(ctx, stormNodes)
	if err != nil {
		return summary, err
	}
	if err := writeJSON(filepath.Join(o.Out, "restart.json"), restart); err != nil {
		return summary, err
	}
	summary.Restart(restart)
	if err := writeJSON(filepath.Join(o.Out, "capacity.json"), CapacityFigures(summary, o)); err != nil {
		return summary, err
	}
	return summary, r.finish(&summary, steps, storm, restart)
}

// finish writes the summary, the charts and the report.
func (r *runner) finish(s *Summary, steps []Step, storm StormReport, restart []RestartReport) error {
	s.Took = time.Since(s.Started).Round(time.Second).String()
	if err := writeJSON(filepath.Join(r.Out, "summary.json"), s); err != nil {
		return err
	}
	if err := WriteCharts(r.Out, steps, storm, restart); err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(r.Out, "report.md"), []byte(Markdown(*s, steps, storm, restart)), 0o644)
}

func (r *runner) logf(format string, args ...any) {
	fmt.Fprintf(r.progress, "==> "+format+"\n", args...)
}

// step brings the cluster to nodes (and a base pod on each), discards a warm-up and judges a hold.
func (r *runner) step(ctx context.Context, have, nodes int) Step {
	st := Step{Nodes: nodes, Pods: nodes, WarmUp: r.WarmUp.String(), Hold: r.Hold.String()}
	if r.LeasesOnly {
		st.Pods = 0
	}
	setup := time.Now()
	err := r.load.SetNodes(ctx, have, nodes, r.NodeQPS)
	st.SetupSeconds = time.Since(setup).Seconds()
	if err != nil {
		st.SetupError = err.Error()
		st.Verdict()
		return st
	}
	r.logf("  %d nodes Ready with %d base pods after %.0f s; warm-up %s", nodes, st.Pods, st.SetupSeconds, r.WarmUp)
	if sleep(ctx, r.WarmUp) != nil {
		st.SetupError = ctx.Err().Error()
		st.Verdict()
		return st
	}
	r.logf("  hold %s", r.Hold)
	if nodes == r.UnderDriven && !r.LeasesOnly { // the lease-only run has no readers
		r.load.Offer(OpGetNode, 100*time.Microsecond)
		defer r.load.Offer(OpGetNode, Readers[OpGetNode])
	}
	if err := r.hold(ctx, &st); err != nil {
		st.HoldError = err.Error()
	}
	st.Verdict()
	return st
}

// hold measures a step: the apiservers' SLIs every ScrapeEvery, etcd at both ends, every
// process's CPU and memory, the load's own view.
func (r *runner) hold(ctx context.Context, st *Step) error {
	targets, err := r.cluster.Targets()
	if err != nil {
		return err
	}
	meter := NewUsageMeter(r.cluster.Processes())
	etcdBefore := scrapeEach(ctx, targets, isEtcd, EtcdMetrics)
	apiBefore, err := scrapeAll(ctx, targets, KindAPIServer, APIServerMetrics)
	if err != nil {
		return err
	}
	r.load.Take()
	st.TaintedNodes[0] = r.load.TaintedNodes()
	began := time.Now()
	scrapes := []Scrape{{At: began, Calls: CallHistograms(apiBefore)}}
	apiAfter := apiBefore
	lastPrint := began
	for time.Since(began) < r.Hold {
		if err := sleep(ctx, r.ScrapeEvery); err != nil {
			return err
		}
		samples, err := scrapeAll(ctx, targets, KindAPIServer, APIServerMetrics)
		if err != nil {
			return err
		}
		apiAfter = samples
		scrapes = append(scrapes, Scrape{At: time.Now(), Calls: CallHistograms(samples)})
		meter.Sample()
		if time.Since(lastPrint) >= 30*time.Second {
			r.logf("  hold: %s of %s", time.Since(began).Round(time.Second), r.Hold)
			lastPrint = time.Now()
		}
	}
	held := time.Since(began)
	st.HeldSeconds, st.TaintedNodes[1] = held.Seconds(), r.load.TaintedNodes()
	measured := r.load.Take()
	etcdAfter := scrapeEach(ctx, targets, isEtcd, EtcdMetrics)
	st.Calls = Judge(scrapes)
	st.PodStartup = PodStartupOf(measured.Startups)
	st.APIServers = APIServerOver(apiBefore, apiAfter)
	rate := func(f func(map[string]string) bool) float64 {
		return (sum(apiAfter, RequestTotalMetric, f) - sum(apiBefore, RequestTotalMetric, f)) / held.Seconds()
	}
	st.LeaseWrites, st.NodeStatusWrites = rate(leaseUpdate), rate(nodeStatusUpdate)
	onTime, _ := r.load.StatusOnTime(time.Now()) // of the pool's nodes, which the step counts
	st.ClientLatency, st.ClientErrors = measured.ClientP99(), measured.Errors
	st.Loads = []Delivery{
		{Load: LeaseRenewals, Offered: float64(st.Nodes) / NodeLeaseRenewal.Seconds(), Delivered: st.LeaseWrites, Seconds: held.Seconds()},
		{Load: NodeStatus, Offered: float64(st.Nodes) / NodeStatusReport.Seconds(), Delivered: float64(onTime) / NodeStatusReport.Seconds(), Seconds: held.Seconds()},
	}
	offered := r.load.Offered()
	for _, op := range slices.Sorted(maps.Keys(offered)) {
		st.Loads = append(st.Loads, Delivery{Load: op, Offered: offered[op], Delivered: float64(measured.Started[op]) / held.Seconds(), Seconds: held.Seconds()})
	}
	st.Usage = meter.Usage()
	for _, t := range targets {
		if isEtcd(t) {
			st.Etcd = append(st.Etcd, EtcdOver(t.Name, t.Kind, etcdBefore[t.Name], etcdAfter[t.Name]))
		}
	}
	return nil
}

func leaseUpdate(l map[string]string) bool {
	return l["resource"] == "leases" && (l["verb"] == "PUT" || l["verb"] == "PATCH")
}

func nodeStatusUpdate(l map[string]string) bool {
	return l["resource"] == "nodes" && l["subresource"] == "status" && (l["verb"] == "PUT" || l["verb"] == "PATCH")
}

func isEtcd(t Target) bool { return t.Kind == KindEtcdMain || t.Kind == KindEtcdEvents }

// scrape reads a target's /metrics, keeping what keep accepts.
func scrape(ctx context.Context, t Target, keep func(string) bool) ([]Sample, error) {
	ctx, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, t.URL+"/metrics", nil)
	if err != nil {
		return nil, err
	}
	resp, err := t.Client.Do(req)
	if err != nil {
		return nil, fmt.Errorf("scrape %s: %w", t.Name, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("scrape %s: %s", t.Name, resp.Status)
	}
	samples, err := ParseText(resp.Body, keep)
	if err != nil {
		return nil, fmt.Errorf("scrape %s: %w", t.Name, err)
	}
	return samples, nil
}

// scrapeAll reads every target of a kind, their samples together (histograms sum over them).
func scrapeAll(ctx context.Context, targets []Target, kind string, keep func(string) bool) ([]Sample, error) {
	var all []Sample
	for _, t := range targets {
		if t.Kind != kind {
			continue
		}
		s, err := scrape(ctx, t, keep)
		if err != nil {
			return nil, err
		}
		all = append(all, s...)
	}
	return all, nil
}

// scrapeEach reads every target match accepts, by name; a target that does not answer is left out.
func scrapeEach(ctx context.Context, targets []Target, match func(Target) bool, keep func(string) bool) map[string][]Sample {
	out := map[string][]Sample{}
	for _, t := range targets {
		if match(t) {
			if s, err := scrape(ctx, t, keep); err == nil {
				out[t.Name] = s
			}
		}
	}
	return out
}

func sleep(ctx context.Context, d time.Duration) error {
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-time.After(d):
		return nil
	}
}

func writeJSON(path string, v any) error {
	data, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return err
	}
	return os.WriteFile(path, append(data, '\n'), 0o644)
}

// writeStep writes a step's files: step.json with everything, and clusterloader2's
// APIResponsivenessPrometheus and PodStartupLatency summaries.
func (r *runner) writeStep(st Step) error {
	dir := filepath.Join(r.Out, fmt.Sprintf("step-%05d", st.Nodes))
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	if err := writeJSON(filepath.Join(dir, "step.json"), st); err != nil {
		return err
	}
	api := perfData{Version: "v1"}
	for _, c := range st.Calls {
		api.DataItems = append(api.DataItems, perfItem{Unit: "ms",
			Data: map[string]float64{"Perc50": ms(c.HoldP50), "Perc90": ms(c.HoldP90), "Perc99": ms(c.P99)},
			Labels: map[string]string{"Resource": c.Call.Resource, "Subresource": c.Call.Subresource, "Verb": c.Call.Verb,
				"Scope": c.Call.Scope, "Count": fmt.Sprint(c.Count), "SlowCount": fmt.Sprint(c.Above1s)}})
	}
	if err := writeJSON(filepath.Join(dir, "APIResponsivenessPrometheus.json"), api); err != nil {
		return err
	}
	p := st.PodStartup
	return writeJSON(filepath.Join(dir, "PodStartupLatency.json"), perfData{Version: "v1", DataItems: []perfItem{{Unit: "ms",
		Data:   map[string]float64{"Perc50": ms(p.P50Seconds), "Perc90": ms(p.P90Seconds), "Perc99": ms(p.P99Seconds)},
		Labels: map[string]string{"Metric": "pod_startup", "Count": fmt.Sprint(p.Pods)}}}})
}

// perfData is clusterloader2's measurement summary format.
type perfData struct {
	Version   string     `json:"version"`
	DataItems []perfItem `json:"dataItems"`
}

type perfItem struct {
	Data   map[string]float64 `json:"data"`
	Unit   string             `json:"unit"`
	Labels map[string]string  `json:"labels"`
}

func ms(seconds float64) float64 {
	if math.IsNaN(seconds) {
		return 0
	}
	return math.Round(seconds*1e6) / 1e3
}

// median of values (NaN for none).
func median(values []float64) float64 {
	if len(values) == 0 {
		return math.NaN()
	}
	return QuantileOverTime(0.5, slices.Clone(values))
}
