package scale

import (
	"math"
	"slices"
	"strings"
	"testing"
	"time"
)

func TestSummarizeStopsAtTheFirstFailingStep(t *testing.T) {
	pass := func(n int) Step { return Step{Nodes: n} }
	slow := Step{Nodes: 2500, Calls: []CallResult{{Call: Call{"nodes", "", "LIST", "cluster"}, Threshold: 30, P99: 31}},
		PodStartup: PodStartup{Pods: 10, P99Seconds: 1, Pass: true}}
	slow.Verdict()
	var s Summary
	s.Summarize([]Step{pass(500), pass(1000), slow})
	if s.LargestPassingNodes != 1000 || s.FirstFailingStep != 2500 || !slices.Equal(s.StepsTried, []int{500, 1000, 2500}) {
		t.Errorf("%+v", s)
	}
	if len(s.FirstFailing) != 1 || s.FirstFailing[0] != "LIST nodes (cluster): p99 31.000 s > 30 s" {
		t.Errorf("failing: %q", s.FirstFailing)
	}
	// A smoke run ramps on: a step passing after the failure counts as tried, not as passing.
	s.Summarize([]Step{pass(500), slow, pass(5000)})
	if s.LargestPassingNodes != 500 || s.FirstFailingStep != 2500 || !slices.Equal(s.StepsTried, []int{500, 2500, 5000}) {
		t.Errorf("ramped past the failure: %+v", s)
	}
}

func TestPodStartupOf(t *testing.T) {
	var l []time.Duration
	for i := 1; i <= 100; i++ {
		l = append(l, time.Duration(i)*100*time.Millisecond) // 0.1 s .. 10 s
	}
	p := PodStartupOf(l)
	// rank 0.99 × 99 = 98.01: between 9.9 s and 10 s.
	if p.Pods != 100 || p.P99Seconds < 9.9 || p.P99Seconds > 9.902 || p.Pass {
		t.Errorf("%+v, want p99 9.901 s, failing", p)
	}
	if !PodStartupOf(l[:40]).Pass {
		t.Error("p99 of 0.1-4 s fails the 5 s SLO")
	}
}

func TestThisMachine(t *testing.T) {
	// A relative directory too: rehearse e2e-times describes the machine from ".".
	for _, dir := range []string{t.TempDir(), "."} {
		m := ThisMachine(dir)
		if m.Cores < 1 || m.MemoryGiB < 1 || m.Kernel == "" || m.Disk == "" {
			t.Errorf("%s: %+v", dir, m)
		}
	}
}

// A step whose load fell short is harness-limited, neither passed nor failed, and ends the ramp's
// verdict; the one call a window's edges may cut off is not a shortfall.
func TestShortLoadMarksTheStepHarnessLimited(t *testing.T) {
	for _, tc := range []struct {
		d     Delivery
		short bool
	}{
		{Delivery{Load: "lease renewals", Offered: 250, Delivered: 126, Seconds: 120}, true},
		{Delivery{Load: "lease renewals", Offered: 250, Delivered: 240, Seconds: 120}, false},
		{Delivery{Load: "get node", Offered: 5, Delivered: 4.7, Seconds: 120}, true},
		{Delivery{Load: "list all pods", Offered: 1.0 / 60, Delivered: 0, Seconds: 35}, false},
		{Delivery{Load: "list all pods", Offered: 1.0 / 60, Delivered: 0, Seconds: 600}, true},
	} {
		if got := tc.d.Short(); got != tc.short {
			t.Errorf("%+v: short %v, want %v", tc.d, got, tc.short)
		}
	}
	ok := PodStartup{Pods: 10, P99Seconds: 1, Pass: true}
	step := func(n int, leases float64) Step {
		st := Step{Nodes: n, PodStartup: ok, Loads: []Delivery{{Load: "lease renewals", Offered: float64(n) / 10, Delivered: leases, Seconds: 120}}}
		st.Verdict()
		return st
	}
	limited := step(2500, 126)
	if limited.Result() != "harness-limited" || limited.Passed() || len(limited.Failing) != 0 ||
		len(limited.HarnessLimited) != 1 || limited.HarnessLimited[0] != "lease renewals: 126.0/s delivered of 250.0/s offered" {
		t.Fatalf("%s, %q, failing %q", limited.Result(), limited.HarnessLimited, limited.Failing)
	}
	var s Summary
	s.Summarize([]Step{step(500, 50), step(1000, 100), limited, step(5000, 500)})
	if s.LargestPassingNodes != 1000 || s.FirstFailingStep != 0 || !slices.Equal(s.HarnessLimitedSteps, []int{2500}) {
		t.Errorf("%+v", s)
	}
}

// The arms' statistics count valid runs only, with Student's t interval around their mean.
func TestStormRatiosLeaveInvalidRunsOut(t *testing.T) {
	rep := StormReport{Runs: []StormRun{
		{Split: true, ProbeRatio: 1, HoursToQuota: 10}, {Split: true, ProbeRatio: 2, HoursToQuota: 20}, {Split: true, ProbeRatio: 3, HoursToQuota: 30},
		{Split: true, ProbeRatio: 50, Invalid: "short"}, {Split: false, ProbeRatio: 4},
	}}
	got := rep.Ratios()
	split := got["split"]
	if split.Runs != 3 || split.Invalid != 1 || split.Median != 2 || split.Mean != 2 || split.HoursToQuota != 20 {
		t.Errorf("split %+v: want 3 valid runs of median and mean 2, one invalid, 20 h to quota", split)
	}
	// Standard deviation 1 over 3 runs: half-width t(0.975, 2) / √3 = 4.303 / 1.732.
	if half := 4.303 / math.Sqrt(3); split.CI95 == nil || math.Abs(split.CI95[0]-(2-half)) > 1e-9 || math.Abs(split.CI95[1]-(2+half)) > 1e-9 {
		t.Errorf("split interval %v, want 2 ± %.3f", split.CI95, half)
	}
	if unsplit := got["unsplit"]; unsplit.Runs != 1 || unsplit.CI95 != nil || unsplit.HoursToQuota != 0 {
		t.Errorf("unsplit %+v: one run has no interval, and no growth no time to quota", unsplit)
	}
}

// A run whose database did not grow never reaches the quota: it sorts last, not first.
func TestMedianHoursToQuotaCountsNeverAsLongest(t *testing.T) {
	for _, c := range []struct {
		hours []float64
		want  float64
	}{{[]float64{0, 10, 20}, 20}, {[]float64{10, 20, 0, 0}, 0}, {[]float64{10, 20, 30, 0}, 25}, {nil, 0}} {
		if got := medianHours(c.hours); got != c.want {
			t.Errorf("medianHours(%v) = %v, want %v", c.hours, got, c.want)
		}
	}
}

// The lease-only run offers no churn: its steps are judged without a pod start-up; a step that
// offered churn and started no pod fails.
func TestVerdictJudgesPodStartupOnlyWhereChurnWasOffered(t *testing.T) {
	leases := Delivery{Load: LeaseRenewals, Offered: 100, Delivered: 99, Seconds: 60}
	st := Step{Nodes: 1000, Loads: []Delivery{leases}}
	st.Verdict()
	if !st.Passed() {
		t.Errorf("lease-only step: %s %v, want passed", st.Result(), st.Failing)
	}
	st.Loads = append(st.Loads, Delivery{Load: OpCreatePod, Offered: 5, Delivered: 5, Seconds: 60})
	st.Verdict()
	if st.Result() != "failed" {
		t.Errorf("a step that offered churn and started no pod: %s, want failed", st.Result())
	}
}

// A hold the benchmark could not measure fails its step and says so as the hold's, not the set-up's.
func TestVerdictFailsAStepWhoseHoldWasNotMeasured(t *testing.T) {
	st := Step{Nodes: 2000, HoldError: "scrape cf-10k-apiserver-0: context deadline exceeded"}
	st.Verdict()
	if st.Result() != "failed" || len(st.Failing) != 1 || !strings.HasPrefix(st.Failing[0], "hold: ") {
		t.Errorf("a step whose apiserver did not answer its scrape: %s %v, want failed by its hold", st.Result(), st.Failing)
	}
}

// The machine's CPU is told at the last step that held its load: a step whose set-up failed
// measured nothing to tell.
func TestSaturationTellsTheLastStepMeasured(t *testing.T) {
	measured := Step{Nodes: 2000, Usage: []Usage{{Component: KindAPIServer, Role: KindAPIServer, CPUCores: 0.6}}}
	notReady := Step{Nodes: 4000, SetupError: "Ready nodes clear of the not-ready taint: 2916 of 4000"}
	got := Saturation(Machine{Cores: 2}, []Step{measured, notReady})
	if !strings.HasPrefix(got, "At 2000 nodes (the last step measured) the processes used 0.60 of 2 cores, most apiserver 0.60") {
		t.Errorf("%q", got)
	}
	if got := Saturation(Machine{Cores: 2}, []Step{notReady}); got != "" {
		t.Errorf("with no step measured: %q, want nothing", got)
	}
}
