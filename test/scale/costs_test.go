package scale

import (
	"math"
	"slices"
	"testing"
)

func TestCostsFitEachComponentOverThePassingSteps(t *testing.T) {
	step := func(nodes int, apiserver, etcd float64) Step {
		return Step{Nodes: nodes, HeldSeconds: 60,
			APIServers: APIServerTotals{Requests: 6000},
			Etcd:       []EtcdMember{{Member: "m-0", Role: KindEtcdMain, Requests: 3000}, {Member: "m-1", Role: KindEtcdMain, Requests: 3000}, {Member: "e-0", Role: KindEtcdEvents, Requests: 50}},
			Usage: []Usage{{Component: KindAPIServer, Role: KindAPIServer, Processes: 2, CPUCores: apiserver, CPULimitCores: 4},
				{Component: KindEtcdMain, Role: KindEtcdMain, Processes: 2, CPUCores: etcd, CPULimitCores: 4}}}
	}
	// apiserver: 0.5 + 0.3 a thousand nodes; etcd-main: 0.2 + 0.1.
	failed := step(8000, 9, 9)
	failed.Failing = []string{"LIST nodes (cluster): p99 31.000 s > 30 s"}
	limited := step(3000, 9, 9)
	limited.HarnessLimited = []string{LeaseRenewals}
	// At 6,000 nodes the apiservers and their scheduler (one cgroup) are at 3.9 of their 4 cores: the
	// cap, not the demand, so that step is left out of the apiserver's line, not etcd's.
	capped := step(6000, 2.3, 0.8)
	capped.Usage = append(capped.Usage, Usage{Component: "kube-scheduler", Role: KindAPIServer, Processes: 1, CPUCores: 1.6, CPULimitCores: 4})
	steps := []Step{step(1000, 0.8, 0.3), step(2000, 1.1, 0.4), limited, step(4000, 1.7, 0.6), failed, capped}
	costs := Costs(steps, false)
	if len(costs) != 3 || costs[0].Component != KindAPIServer || costs[1].Component != KindEtcdMain {
		t.Fatalf("%+v", costs)
	}
	near := func(a, b float64) bool { return math.Abs(a-b) < 1e-9 }
	api, etcd := costs[0], costs[1]
	if !near(api.BaseCores, 0.5) || !near(api.CoresPer1000Nodes, 0.3) || api.Replicas != 2 || !slices.Equal(api.Steps, []int{1000, 2000, 4000}) || !slices.Equal(api.CappedSteps, []int{6000}) {
		t.Errorf("apiserver %+v, want 0.5 + 0.3 per 1,000 nodes over the three uncapped passing steps", api)
	}
	if !near(etcd.BaseCores, 0.2) || !near(etcd.CoresPer1000Nodes, 0.1) || len(etcd.Steps) != 4 {
		t.Errorf("etcd-main %+v, want 0.2 + 0.1 per 1,000 nodes over four steps", etcd)
	}
	// At 6,000 nodes, the largest passing step: 100 requests a second on 2.3 cores; etcd-main's two
	// members 100 on 0.8.
	if !near(api.RequestsPerCore, 100/2.3) || !near(etcd.RequestsPerCore, 100/0.8) {
		t.Errorf("requests per core: apiserver %v, etcd-main %v", api.RequestsPerCore, etcd.RequestsPerCore)
	}
	// One passing step: its mean a thousand nodes, no base.
	one := Costs([]Step{step(2000, 1.1, 0.4), failed}, false)
	if !near(one[0].CoresPer1000Nodes, 0.55) || one[0].BaseCores != 0 {
		t.Errorf("one step: %+v", one[0])
	}
	// The lease-only run measures cost, not capacity: a step that missed an SLO under its whole
	// load is on the line too; a harness-limited one never is.
	missed := step(4000, 1.7, 0.6)
	missed.Failing = []string{"PATCH nodes/status (resource): p99 1.207 s > 1 s"}
	ramp := []Step{step(1000, 0.8, 0.3), limited, step(2000, 1.1, 0.4), missed}
	if got := Costs(ramp, true)[0]; !near(got.BaseCores, 0.5) || !near(got.CoresPer1000Nodes, 0.3) || !slices.Equal(got.Steps, []int{1000, 2000, 4000}) {
		t.Errorf("lease-only apiserver %+v, want 0.5 + 0.3 per 1,000 nodes over 1,000, 2,000 and the missed 4,000", got)
	}
	if got := Costs(ramp, false)[0]; !slices.Equal(got.Steps, []int{1000, 2000}) {
		t.Errorf("ramp apiserver fitted over %v, want the passing 1,000 and 2,000", got.Steps)
	}
}
