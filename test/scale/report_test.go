package scale

import (
	"slices"
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
	m := ThisMachine(t.TempDir())
	if m.Cores < 1 || m.MemoryGiB < 1 || m.Kernel == "" || m.Disk == "" {
		t.Errorf("%+v", m)
	}
}
