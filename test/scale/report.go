package scale

import (
	"bufio"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"
)

// PodStartupSLO is the upstream pod start-up SLO: p99 within 5 s for stateless pods created at a
// steady rate, from creation to Running as a client's watch sees it.
const PodStartupSLO = 5 * time.Second

// PodStartup is the pod start-up latency of a hold.
type PodStartup struct {
	Pods       int     `json:"pods"`
	P50Seconds float64 `json:"p50Seconds"`
	P90Seconds float64 `json:"p90Seconds"`
	P99Seconds float64 `json:"p99Seconds"`
	Pass       bool    `json:"pass"`
}

// PodStartupOf summarizes start-up latencies (creation to Running, as watched).
func PodStartupOf(latencies []time.Duration) PodStartup {
	secs := make([]float64, len(latencies))
	for i, l := range latencies {
		secs[i] = l.Seconds()
	}
	p := PodStartup{Pods: len(latencies)}
	if len(secs) > 0 {
		p.P50Seconds, p.P90Seconds, p.P99Seconds = QuantileOverTime(0.5, secs), QuantileOverTime(0.9, secs), QuantileOverTime(0.99, secs)
	}
	p.Pass = p.P99Seconds <= PodStartupSLO.Seconds()
	return p
}

// Step is one step of the ramp: its node count and everything measured during its hold.
type Step struct {
	Nodes int `json:"nodes"`
	// Pods are the base pods, one per node; churned pods come and go beside them.
	Pods int `json:"pods"`
	// SetupSeconds is how long registering the nodes and placing the base pods took; SetupError
	// says why they did not finish, which fails the step.
	SetupSeconds float64 `json:"setupSeconds"`
	SetupError   string  `json:"setupError,omitempty"`
	WarmUp       string  `json:"warmUp"`
	Hold         string  `json:"hold"`
	// HeldSeconds is how long the hold took; HoldError says why it could not be measured (an
	// apiserver too busy to answer its metrics scrape), which fails the step.
	HeldSeconds float64 `json:"heldSeconds"`
	HoldError   string  `json:"holdError,omitempty"`
	// TaintedNodes counts the Ready nodes tainted not-ready at the start and the end of the hold:
	// the set-up waits for none at the start, so a count at the end is a node the node lifecycle
	// controller saw fail during the hold.
	TaintedNodes [2]int          `json:"taintedNodes"`
	Calls        []CallResult    `json:"calls"`
	PodStartup   PodStartup      `json:"podStartup"`
	APIServers   APIServerTotals `json:"apiservers"`
	Etcd         []EtcdMember    `json:"etcd"`
	Usage        []Usage         `json:"usage"`
	// LeaseWrites is the rate of Lease updates the apiservers served (nodes' heartbeats, and
	// leader elections' few), per second.
	LeaseWrites float64 `json:"leaseWritesPerSecond"`
	// NodeStatusWrites is the rate of node status updates the apiservers served, per second.
	NodeStatusWrites float64 `json:"nodeStatusWritesPerSecond"`
	// ClientLatency is the load generator's own p99 per operation, in seconds; ClientErrors
	// counts its failed calls.
	ClientLatency map[string]float64 `json:"clientP99Seconds"`
	ClientErrors  map[string]int     `json:"clientErrors"`
	// Loads are each kind of load the step offered and what was delivered during the hold.
	Loads []Delivery `json:"loads"`
	// HarnessLimited names each load delivered short of HarnessShare of its offer: the step then
	// measured the harness, not the control plane, and is neither passed nor failed.
	HarnessLimited []string `json:"harnessLimited,omitempty"`
	// Failing names each SLO the step missed; empty when it passed.
	Failing []string `json:"failing"`
}

// HarnessShare is the share of each offered load a step must deliver to be judged.
const HarnessShare = 0.95

// A kubelet's node lease lasts 40 s and is renewed every quarter of that: a step of N nodes offers
// N/10 lease writes a second.
const (
	NodeLeaseDuration = 40 * time.Second
	NodeLeaseRenewal  = NodeLeaseDuration / 4
)

// A kubelet reports its node's status every 5 minutes when nothing changed (its default
// nodeStatusReportFrequency, which the stack keeps); NodeStatusLate is how far past that a
// report may come before its node counts as behind.
const (
	NodeStatusReport = 5 * time.Minute
	NodeStatusLate   = NodeStatusReport / 10
)

// The loads the nodes make, as a step's Loads name them.
const (
	LeaseRenewals = "lease renewals"
	// NodeStatus is delivered at the rate of the nodes whose last status report is at most
	// NodeStatusReport+NodeStatusLate old: counting reports in a hold shorter than a few periods
	// measures the nodes' phases, not whether they kept up.
	NodeStatus = "node status"
)

// Delivery is one kind of load a step offered and what was delivered, each a rate per second,
// over a window of Seconds.
type Delivery struct {
	Load      string  `json:"load"`
	Offered   float64 `json:"offeredPerSecond"`
	Delivered float64 `json:"deliveredPerSecond"`
	Seconds   float64 `json:"seconds"`
}

// Short says the load fell below HarnessShare of its offer, by more than the one call a window's
// edges may cut off (a reader offering one call a minute makes none in some 35 s windows).
func (d Delivery) Short() bool { return d.Delivered*d.Seconds+1 < HarnessShare*d.Offered*d.Seconds }

// Verdict fills in HarnessLimited from the step's loads, and Failing from its set-up, calls and
// pod start-up.
func (s *Step) Verdict() {
	s.Failing, s.HarnessLimited = nil, nil
	for _, d := range s.Loads {
		if d.Short() {
			s.HarnessLimited = append(s.HarnessLimited, fmt.Sprintf("%s: %.1f/s delivered of %.1f/s offered", d.Load, d.Delivered, d.Offered))
		}
	}
	if s.SetupError != "" {
		s.Failing = append(s.Failing, "set-up: "+s.SetupError)
		return
	}
	if s.HoldError != "" {
		s.Failing = append(s.Failing, "hold: "+s.HoldError)
		return
	}
	for _, c := range s.Calls {
		if !c.Pass {
			s.Failing = append(s.Failing, c.Call.String()+": p99 "+strconv.FormatFloat(c.P99, 'f', 3, 64)+" s > "+strconv.FormatFloat(c.Threshold, 'f', 0, 64)+" s")
		}
	}
	switch {
	case s.offered(OpCreatePod) == 0: // the lease-only run starts no pods
	case s.PodStartup.Pods == 0:
		s.Failing = append(s.Failing, "pod start-up: no churned pod started during the hold")
	case !s.PodStartup.Pass:
		s.Failing = append(s.Failing, "pod start-up: p99 "+strconv.FormatFloat(s.PodStartup.P99Seconds, 'f', 3, 64)+" s > 5 s")
	}
}

// offered is the rate the step offered of a load, 0 if it offered none.
func (s *Step) offered(load string) float64 {
	for _, d := range s.Loads {
		if d.Load == load {
			return d.Offered
		}
	}
	return 0
}

// Result is the step's verdict: "harness-limited" when a load fell short, else "passed" or "failed".
func (s *Step) Result() string {
	switch {
	case len(s.HarnessLimited) > 0:
		return "harness-limited"
	case len(s.Failing) > 0:
		return "failed"
	}
	return "passed"
}

// Measured reports whether every load was delivered and the hold was measured, whatever the SLOs.
func (s *Step) Measured() bool {
	return len(s.HarnessLimited) == 0 && s.SetupError == "" && s.HoldError == ""
}

// Passed reports whether every load was delivered and every SLO held.
func (s *Step) Passed() bool { return s.Result() == "passed" }

// Machine is the host a benchmark ran on.
type Machine struct {
	Cores     int    `json:"cores"`
	MemoryGiB int    `json:"memoryGiB"`
	Kernel    string `json:"kernel"`
	CPU       string `json:"cpu"`
	// Disk is the filesystem the benchmark's data lives on and its backing device.
	Disk string `json:"disk"`
}

// String is the machine in one line, for reports.
func (m Machine) String() string {
	return fmt.Sprintf("%d cores (%s), %d GiB, kernel %s, data on %s", m.Cores, m.CPU, m.MemoryGiB, m.Kernel, m.Disk)
}

// ThisMachine describes the host; dir is where the benchmark writes its data.
func ThisMachine(dir string) Machine {
	m := Machine{Cores: runtime.NumCPU()}
	var u unix.Utsname
	if unix.Uname(&u) == nil {
		m.Kernel = unix.ByteSliceToString(u.Release[:])
	}
	var si unix.Sysinfo_t
	if unix.Sysinfo(&si) == nil {
		m.MemoryGiB = int((uint64(si.Totalram)*uint64(si.Unit) + 1<<29) >> 30)
	}
	m.CPU = firstField("/proc/cpuinfo", "model name")
	if abs, err := filepath.Abs(dir); err == nil {
		m.Disk = mountOf(abs) // mounts are absolute: "." would match none
	}
	return m
}

// firstField is the value of the first "key : value" line of file with that key.
func firstField(file, key string) string {
	f, err := os.Open(file)
	if err != nil {
		return ""
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		k, v, ok := strings.Cut(sc.Text(), ":")
		if ok && strings.TrimSpace(k) == key {
			return strings.TrimSpace(v)
		}
	}
	return ""
}

// mountOf names the filesystem holding dir: "<device> <fstype> on <mount point>".
func mountOf(dir string) string {
	data, err := os.ReadFile("/proc/self/mounts")
	if err != nil {
		return ""
	}
	best := ""
	var bestFields []string
	for _, line := range strings.Split(string(data), "\n") {
		f := strings.Fields(line)
		if len(f) < 3 {
			continue
		}
		if (dir == f[1] || strings.HasPrefix(dir, strings.TrimSuffix(f[1], "/")+"/")) && len(f[1]) >= len(best) {
			best, bestFields = f[1], f
		}
	}
	if bestFields == nil {
		return ""
	}
	return bestFields[0] + " " + bestFields[2] + " on " + bestFields[1]
}

// Summary is the benchmark's headline: summary.json.
type Summary struct {
	Stack string `json:"stack"`
	// Topology, CPULimits and EtcdFsyncLatency are Options'.
	Topology            string             `json:"topology"`
	CPULimits           map[string]float64 `json:"cpuLimits,omitempty"`
	EtcdFsyncLatency    string             `json:"etcdFsyncLatency,omitempty"`
	Machine             Machine            `json:"machine"`
	StepsTried          []int              `json:"stepsTried"`
	LargestPassingNodes int                `json:"largestPassingNodes"`
	// HarnessLimitedSteps are the steps whose load fell short; the ramp's verdict ends at the first.
	HarnessLimitedSteps []int `json:"harnessLimitedSteps"`
	// FirstFailing is the first step that missed an SLO, with what it missed; empty when every
	// step passed.
	FirstFailing     []string `json:"firstFailing,omitempty"`
	FirstFailingStep int      `json:"firstFailingNodes,omitempty"`
	// StormNodes is the node count the storm ran at, StormEventsPerSecond the storm's rate.
	StormNodes           int     `json:"stormNodes"`
	StormEventsPerSecond float64 `json:"stormEventsPerSecond"`
	// StormRatio is the main etcd's write probe p99 during the storm ÷ quiet, with the events
	// split ("split") and without ("unsplit"), over each arm's valid runs; with the main etcd's
	// projected hours to quota.
	StormRatio map[string]RatioStats `json:"stormRatio"`
	// RestartRecoverySeconds is how long after every apiserver restarted at once every SLO held
	// again with informers that list, as kubelets' do (RestartReport), null if it did not within
	// the timeout; RestartWatchListRecoverySeconds the same with informers that stream.
	// RestartPeakMemoryBytes is the restarted apiservers' highest resident memory, the largest of
	// them, by informer kind.
	RestartRecoverySeconds          *float64         `json:"restartRecoverySeconds"`
	RestartWatchListRecoverySeconds *float64         `json:"restartWatchListRecoverySeconds"`
	RestartPeakMemoryBytes          map[string]int64 `json:"restartPeakMemoryBytes"`
	// LeasesOnly marks the lease-only microbenchmark: every step is measured, and its costs fitted
	// over every step whose load was delivered, within the SLOs or not.
	LeasesOnly bool `json:"leasesOnly,omitempty"`
	// Costs are each component's cores as a line in the nodes, over the passing steps (every
	// measured step in the lease-only run).
	Costs   []Cost    `json:"costs"`
	Started time.Time `json:"started"`
	Took    string    `json:"took"`
}

// Restart records the restart storms.
func (s *Summary) Restart(storms []RestartReport) {
	s.RestartRecoverySeconds, s.RestartWatchListRecoverySeconds, s.RestartPeakMemoryBytes = nil, nil, map[string]int64{}
	for _, r := range storms {
		var recovered *float64
		if r.Recovered {
			recovered = &r.RecoverySeconds
		}
		if r.WatchList {
			s.RestartWatchListRecoverySeconds = recovered
		} else {
			s.RestartRecoverySeconds = recovered
		}
		kind := informerKind(r.WatchList)
		for _, b := range r.PeakMemoryBytes {
			s.RestartPeakMemoryBytes[kind] = max(s.RestartPeakMemoryBytes[kind], b)
		}
	}
}

// Summarize fills the ramp's verdict and costs from its steps, in ramp order: the ramp stops at the first
// step that did not pass, failed or harness-limited.
func (s *Summary) Summarize(steps []Step) {
	s.StepsTried, s.LargestPassingNodes, s.FirstFailing, s.FirstFailingStep, s.HarnessLimitedSteps = nil, 0, nil, 0, []int{}
	ended := false
	for _, st := range steps {
		s.StepsTried = append(s.StepsTried, st.Nodes)
		switch {
		case st.Result() == "harness-limited":
			s.HarnessLimitedSteps = append(s.HarnessLimitedSteps, st.Nodes)
		case ended: // a smoke run ramps on past a failure; the verdict stands
		case st.Result() == "failed":
			s.FirstFailing, s.FirstFailingStep = slices.Clone(st.Failing), st.Nodes
		default:
			s.LargestPassingNodes = st.Nodes
		}
		ended = ended || !st.Passed()
	}
	s.Costs = Costs(steps, s.LeasesOnly)
}
