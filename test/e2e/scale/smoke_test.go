// The scale benchmark's smoke run: a few hundred KWOK nodes, a minute of hold, one round of split
// and unsplit storm runs and the restart storms on the capacity topology of the prod-10k stack
// (one machine of each control-plane role, its tier's flags, each role capped at its cores). It
// checks that the harness works end to end and that its report is complete; it asserts no latency.
package scale_test

import (
	"context"
	"encoding/json"
	"encoding/xml"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/clusterforge/clusterforge/components/spec"
	"github.com/clusterforge/clusterforge/test/e2e/framework"
	"github.com/clusterforge/clusterforge/test/etcdprobe"
	"github.com/clusterforge/clusterforge/test/machines"
	"github.com/clusterforge/clusterforge/test/machines/processes"
	"github.com/clusterforge/clusterforge/test/scale"
)

func TestMain(m *testing.M) {
	// The rehearsal starts its load balancer as `<this binary> lb ...`.
	machines.ServeSubcommand()
	os.Exit(m.Run())
}

func TestScaleBenchmarkSmoke(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a rehearsal")
	}
	root, err := filepath.Abs(filepath.Join("..", "..", ".."))
	if err != nil {
		t.Fatal(err)
	}
	tools := filepath.Join(root, ".tools", "bin")
	if _, err := os.Stat(filepath.Join(tools, "kwok")); err != nil {
		t.Fatalf("the pinned binaries are missing from %s: run `make tools` (or `go test -short`)", tools)
	}
	const stack = "prod-10k"
	c, err := spec.LoadStack(spec.StackFile(filepath.Join(root, spec.StackDir), stack))
	if err != nil {
		t.Fatal(err)
	}
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(root, "build", "scale-check", "report")
	if err := os.RemoveAll(out); err != nil {
		t.Fatal(err)
	}
	o := scale.DefaultOptions(out)
	// A hold of 35 s still spans the load's 30 s cluster-wide list; the smoke run checks that every
	// part of the report is produced, not the figures.
	o.Steps, o.WarmUp, o.Hold = []int{150, 300}, 3*time.Second, 35*time.Second
	// Both steps, whatever the first one's verdict: under `make test`'s other packages this
	// machine may miss an SLO at 150 nodes, and the charts need two points.
	o.RampPastFailure = true
	// The second step's get-node reader is offered more than it can deliver: the accounting must
	// mark that step harness-limited.
	o.UnderDriven = 300
	// One round: each arm's run, counted and given its ratio, shows the harness works end to end;
	// the interval over several runs is unit-tested, and a second round cost 70 s here.
	o.Storm.Settle, o.Storm.Quiet, o.Storm.Storm, o.Storm.Recovery, o.Storm.Rounds, o.Storm.Level = 5*time.Second, 5*time.Second, 5*time.Second, 5*time.Second, 1, 5*time.Second
	o.Restart.Settle, o.Restart.Timeout = 5*time.Second, 3*time.Minute
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Minute)
	defer cancel()
	rehearsal := filepath.Join(root, "build", "scale-check", "rehearsal")
	// Each etcd member's disk stand-in flushes slower than this machine's own disk, so the storm's
	// fsync p99 shows whose flushes etcd waited for.
	const fsync = 20 * time.Millisecond
	summary, err := processes.BenchScale(ctx, c, stack, processes.TopologyCapacity, machines.Options{
		Dir: rehearsal, Tools: tools, Base: framework.BaseScaleSmoke, Self: []string{self}, EtcdFsyncLatency: fsync,
	}, o, os.Stderr)
	if err != nil {
		t.Fatal(err)
	}
	checkCapacityTopology(t, c, rehearsal, summary)

	var got map[string]any
	readJSON(t, filepath.Join(out, "summary.json"), &got)
	for _, key := range []string{"largestPassingNodes", "harnessLimitedSteps", "stormRatio", "machine", "stepsTried", "restartRecoverySeconds", "restartWatchListRecoverySeconds", "topology", "cpuLimits", "etcdFsyncLatency", "costs"} {
		if _, ok := got[key]; !ok {
			t.Errorf("summary.json has no %q", key)
		}
	}
	if _, ok := got["largestPassingNodes"].(float64); !ok {
		t.Errorf("largestPassingNodes is %T, want a number", got["largestPassingNodes"])
	}
	// Every run is counted, valid or not; an arm has a ratio once one run is valid, and an
	// interval once two are (a run whose generator fell short on a loaded machine is invalid).
	for _, arm := range []string{"split", "unsplit"} {
		r := summary.StormRatio[arm]
		if r.Runs+r.Invalid != o.Storm.Rounds || r.Runs == 0 || r.Median <= 0 || (r.CI95 != nil) != (r.Runs > 1) {
			t.Errorf("stormRatio %s %+v: want %d runs counted, a ratio from the valid ones and an interval for two", arm, r, o.Storm.Rounds)
		}
	}
	if m := summary.Machine; m.Cores < 1 || m.MemoryGiB < 1 || m.Kernel == "" || m.Disk == "" {
		t.Errorf("machine %+v incomplete", m)
	}
	if len(summary.StepsTried) == 0 || summary.StepsTried[0] != 150 {
		t.Fatalf("steps tried %v, want the ramp from 150", summary.StepsTried)
	}
	for _, nodes := range summary.StepsTried {
		checkStep(t, filepath.Join(out, fmt.Sprintf("step-%05d", nodes)), nodes)
	}
	if !slices.Contains(summary.HarnessLimitedSteps, 300) {
		t.Errorf("harness-limited steps %v: the under-driven 300-node step is not among them", summary.HarnessLimitedSteps)
	}

	var storm scale.StormReport
	readJSON(t, filepath.Join(out, "storm.json"), &storm)
	if len(storm.Calibration) == 0 || storm.Rate <= 0 || storm.Note == "" {
		t.Errorf("storm calibration %+v, rate %v, note %q", storm.Calibration, storm.Rate, storm.Note)
	}
	// The probe ran in a process of its own beside the main etcd, which logged and recorded.
	if samples := etcdprobe.Read(filepath.Join(out, scale.ProbeFile)).Between(time.Time{}, time.Now()); len(samples) == 0 {
		t.Errorf("%s holds no sample of the write probe", scale.ProbeFile)
	}
	if logs, _ := filepath.Glob(filepath.Join(rehearsal, "logs", "*."+etcdprobe.Command+".log")); len(logs) != 1 {
		t.Errorf("the write probe's own process logged to %v, want one log beside the main etcd", logs)
	}
	var names []string
	for _, run := range storm.Runs {
		names = append(names, run.Name)
		if len(run.Phases) != 3 || len(run.Series) == 0 {
			t.Errorf("storm run %s: %d phases, %d points", run.Name, len(run.Phases), len(run.Series))
			continue
		}
		for _, p := range run.Phases {
			if p.Probes == 0 || p.ProbeP99 <= 0 {
				t.Errorf("storm run %s, %s: %d probes, p99 %v", run.Name, p.Name, p.Probes, p.ProbeP99)
			}
			if p.FsyncP99 < fsync.Seconds() {
				t.Errorf("storm run %s, %s: the main etcd's WAL fsync p99 %.1f ms, under its disk stand-in's %s", run.Name, p.Name, 1e3*p.FsyncP99, fsync)
			}
		}
		st := run.Phases[1]
		if st.EventsPerSecond <= 0 || st.DBSizeBytes <= 0 || st.QuotaBytes < st.DBSizeBytes {
			t.Errorf("storm run %s: %.0f events/s, main etcd %.0f of %.0f bytes", run.Name, st.EventsPerSecond, st.DBSizeBytes, st.QuotaBytes)
		}
		if st.SentPerSecond < st.EventsPerSecond {
			t.Errorf("storm run %s: %.0f events created a second of %.0f sent", run.Name, st.EventsPerSecond, st.SentPerSecond)
		}
	}
	var want []string
	for round := 1; round <= o.Storm.Rounds; round++ {
		want = append(want, fmt.Sprintf("A%d split", round), fmt.Sprintf("B%d unsplit", round))
	}
	if !slices.Equal(names, want) {
		t.Errorf("storm runs %v, want %v", names, want)
	}

	var restarts []scale.RestartReport
	readJSON(t, filepath.Join(out, "restart.json"), &restarts)
	if len(restarts) != 2 || restarts[0].WatchList || !restarts[1].WatchList {
		t.Fatalf("restart storms %+v: want one with listing informers, then one with watch lists", restarts)
	}
	for _, r := range restarts {
		if !r.Recovered || r.RecoverySeconds <= 0 || r.ReadySeconds <= 0 || r.ReconnectedSeconds <= 0 || r.ProbeCalls == 0 {
			t.Errorf("restart storm %+v: want it recovered, with the apiservers ready, every informer served and the probe run", r)
		}
		if r.Informers != r.Nodes || r.ProbeMisses == 0 {
			t.Errorf("restart storm: %d informers at %d nodes, %d probe calls missed: want one informer a node and the restart seen by the probe", r.Informers, r.Nodes, r.ProbeMisses)
		}
		// Informers that list must not stream, and the others must: the storm measures what it says.
		if streamed := map[bool]int{false: 0, true: r.Refetched}[r.WatchList]; r.Streamed != streamed {
			t.Errorf("restart storm (watch list %v): %d of %d refetches streamed, want %d", r.WatchList, r.Streamed, r.Refetched, streamed)
		}
		if n := len(r.Timeline); n == 0 || r.Timeline[n-1].Served != 1 || r.Timeline[n-1].SlowestShare > 1 {
			t.Errorf("restart storm (watch list %v): timeline %+v, want it to end recovered: every informer served, every call within its SLO", r.WatchList, r.Timeline)
		}
		if len(r.PeakMemoryBytes) != 1 || slices.Contains(slices.Collect(maps.Values(r.PeakMemoryBytes)), 0) {
			t.Errorf("restart storm: peak memory %v, want the one apiserver's", r.PeakMemoryBytes)
		}
	}

	for _, chart := range []string{"slo.svg", "cpu.svg", "memory.svg", "etcd-size.svg", "storm.svg", "restart.svg"} {
		checkChart(t, filepath.Join(out, chart))
	}
	report, err := os.ReadFile(filepath.Join(out, "report.md"))
	if err != nil {
		t.Fatal(err)
	}
	wants := []string{"Topology: capacity, each role's processes capped", "Largest node count within the SLOs", "| 150 |", "A1 split", "B1 unsplit", "Restart storm", "each etcd member on a disk of its own whose flushes take 20ms"}
	if summary.LargestPassingNodes > 0 {
		wants = append(wants, "cores per 1,000 nodes")
	}
	for _, want := range wants {
		if !strings.Contains(string(report), want) {
			t.Errorf("report.md lacks %q", want)
		}
	}
}

// checkCapacityTopology checks the run was of the capacity topology: its apiserver ran with the
// tier's flags (the stack file's, read from the process's own command line in its log), and
// each server's cost was fitted when a step passed.
func checkCapacityTopology(t *testing.T, c *spec.Cluster, rehearsal string, s scale.Summary) {
	t.Helper()
	if s.Topology != processes.TopologyCapacity || !maps.Equal(s.CPULimits, processes.CapacityCPU) {
		t.Errorf("topology %q, CPU limits %v: want %q, %v", s.Topology, s.CPULimits, processes.TopologyCapacity, processes.CapacityCPU)
	}
	logs, _ := filepath.Glob(filepath.Join(rehearsal, "logs", "*."+processes.APIServerProcess+".log"))
	if len(logs) != 1 {
		t.Fatalf("apiserver logs %v, want one apiserver", logs)
	}
	log, err := os.ReadFile(logs[0])
	if err != nil {
		t.Fatal(err)
	}
	for _, flag := range []string{fmt.Sprintf("--max-requests-inflight=%d", c.APIServer.MaxRequestsInflight), fmt.Sprintf("--max-mutating-requests-inflight=%d", c.APIServer.MaxMutatingRequestsInflight)} {
		if !regexp.MustCompile(regexp.QuoteMeta(flag) + `(\s|$)`).Match(log) {
			t.Errorf("the apiserver did not start with the tier's %q (%s)", flag, logs[0])
		}
	}
	if s.LargestPassingNodes == 0 {
		return // no step passed under make test's load: nothing to fit
	}
	fitted := map[string]scale.Cost{}
	for _, cost := range s.Costs {
		fitted[cost.Component] = cost
	}
	for _, role := range []string{scale.KindAPIServer, scale.KindEtcdMain, scale.KindEtcdEvents} {
		if f := fitted[role]; f.CoresPer1000Nodes <= 0 || f.RequestsPerCore <= 0 || f.Replicas != 1 {
			t.Errorf("cost of %s %+v: want cores per 1,000 nodes and requests per core of one replica", role, f)
		}
	}
}

// checkStep checks one step's files: every SLO class measured, pod start-ups seen, every component's
// use, every etcd member, the nodes' lease writes, and the identities' priority levels.
func checkStep(t *testing.T, dir string, nodes int) {
	t.Helper()
	var st scale.Step
	readJSON(t, filepath.Join(dir, "step.json"), &st)
	if st.Nodes != nodes || st.SetupError != "" || st.HoldError != "" {
		t.Errorf("step %d: nodes %d, set-up error %q, hold error %q", nodes, st.Nodes, st.SetupError, st.HoldError)
		return
	}
	classes := map[string]bool{}
	for _, c := range st.Calls {
		classes[c.Class] = true
	}
	for _, class := range scale.Classes {
		if !classes[class.Name] {
			t.Errorf("step %d: no call of class %q measured", nodes, class.Name)
		}
	}
	if st.PodStartup.Pods == 0 {
		t.Errorf("step %d: no pod start-up measured", nodes)
	}
	used := map[string]bool{}
	for _, u := range st.Usage {
		used[u.Component] = u.CPUCores > 0 && u.RSSBytes > 0
		// The capacity topology: one process of each server, capped at its role's cores, as the
		// kernel reads the cap of the cgroup each process is in.
		if role := u.Component; role == scale.KindAPIServer || role == scale.KindEtcdMain || role == scale.KindEtcdEvents {
			if u.Processes != 1 || u.CPULimitCores != processes.CapacityCPU[role] {
				t.Errorf("step %d: %s runs %d processes capped at %v cores, want one capped at %v", nodes, role, u.Processes, u.CPULimitCores, processes.CapacityCPU[role])
			}
		}
	}
	for _, c := range []string{scale.KindAPIServer, "kube-controller-manager", "kube-scheduler", scale.KindEtcdMain, scale.KindEtcdEvents, "kwok", "lb"} {
		if !used[c] {
			t.Errorf("step %d: no CPU and memory of %s in %v", nodes, c, st.Usage)
		}
	}
	if len(st.Etcd) != 2 {
		t.Errorf("step %d: %d etcd members reported, want one main and one events", nodes, len(st.Etcd))
	}
	for _, m := range st.Etcd {
		if m.Requests <= 0 {
			t.Errorf("step %d: etcd member %s served no request", nodes, m.Member)
		}
	}
	// A lease every 10 s per node; the leader elections add a few.
	if low := float64(nodes) / scale.NodeLeaseRenewal.Seconds() * 0.5; st.LeaseWrites < low {
		t.Errorf("step %d: %.1f lease writes/s, want at least %.0f", nodes, st.LeaseWrites, low)
	}
	// A status report every 5 minutes per node, spread over the period: KWOK's own heartbeat
	// stage, every 20 to 25 s, would pass the upper bound several times over, and a report stage
	// that never fires would miss the lower one.
	kubelets := float64(nodes) / scale.NodeStatusReport.Seconds()
	if st.NodeStatusWrites > 2*kubelets+1 || st.NodeStatusWrites < kubelets/4 {
		t.Errorf("step %d: %.2f node status writes/s, want %.2f to %.2f: the nodes do not report as kubelets do", nodes, st.NodeStatusWrites, kubelets/4, 2*kubelets+1)
	}
	// KWOK's leases go through priority and fairness as a node's (node-high), the load as an
	// ordinary user's (global-default): neither is exempt.
	offered := map[string]bool{}
	for _, d := range st.Loads {
		offered[d.Load] = d.Offered > 0 && d.Seconds > 0
	}
	for _, load := range append([]string{scale.LeaseRenewals, scale.NodeStatus, scale.OpCreatePod}, slices.Collect(maps.Keys(scale.Readers))...) {
		if !offered[load] {
			t.Errorf("step %d: no offered rate of %s in %+v", nodes, load, st.Loads)
		}
	}
	if limited := strings.Join(st.HarnessLimited, "; "); nodes == 300 && !strings.Contains(limited, scale.OpGetNode+":") {
		t.Errorf("step 300 offered %s 10,000 times a second, yet it is not harness-limited by it: %q, loads %+v", scale.OpGetNode, limited, st.Loads)
	} else if nodes == 300 && st.Result() != "harness-limited" {
		t.Errorf("step 300's result %q, want harness-limited", st.Result())
	}
	for _, level := range []string{"node-high", "global-default"} {
		if _, ok := st.APIServers.APFWaitP99[level]; !ok {
			t.Errorf("step %d: no request queued at priority level %s: %v", nodes, level, st.APIServers.APFWaitP99)
		}
	}
	for _, f := range []string{"APIResponsivenessPrometheus.json", "PodStartupLatency.json"} {
		var perf struct {
			Version   string `json:"version"`
			DataItems []struct {
				Data map[string]float64 `json:"data"`
			} `json:"dataItems"`
		}
		readJSON(t, filepath.Join(dir, f), &perf)
		if perf.Version != "v1" || len(perf.DataItems) == 0 {
			t.Errorf("step %d: %s has no data items", nodes, f)
			continue
		}
		if _, ok := perf.DataItems[0].Data["Perc99"]; !ok {
			t.Errorf("step %d: %s has no Perc99", nodes, f)
		}
	}
}

// checkChart checks a chart is well-formed SVG with at least one line.
func checkChart(t *testing.T, path string) {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Error(err)
		return
	}
	d := xml.NewDecoder(strings.NewReader(string(data)))
	lines := 0
	for {
		tok, err := d.Token()
		if err != nil {
			break
		}
		if se, ok := tok.(xml.StartElement); ok && se.Name.Local == "polyline" {
			lines++
		}
	}
	if lines == 0 {
		t.Errorf("%s draws no line", path)
	}
}

func readJSON(t *testing.T, path string, v any) {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(data, v); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
}
