package scale

import (
	"slices"
	"strings"

	"github.com/clusterforge/clusterforge/components/capacity"
)

// Cost is what one component of the control plane spends in CPU as its nodes grow, fitted over
// the ramp's passing steps: the line a capacity model maps onto each tier's VM sizes.
type Cost struct {
	// Component, Role and the fitted line: BaseCores + CoresPer1000Nodes × nodes/1000 is the
	// least-squares line through the component's cores (summed over its processes) at each step
	// of Steps. With one step, BaseCores is 0 and the slope its mean, which over-states the cost
	// of the nodes by what the component spends on none.
	capacity.Cost
	// Replicas counts the component's processes.
	Replicas int   `json:"replicas"`
	Steps    []int `json:"steps"`
	// CappedSteps are passing steps left out because the component's role used 90 % or more of
	// its CPU cap: there the cores show the cap, not the demand.
	CappedSteps []int `json:"cappedSteps,omitempty"`
	// RequestsPerCore is the requests it served a second per core it used, at the largest step
	// fitted: an apiserver's requests but streams, an etcd's unary calls. 0 for the others.
	RequestsPerCore float64 `json:"requestsPerCore,omitempty"`
}

// CapShare is the share of its CPU cap past which a role counts as held at its cap.
const CapShare = 0.9

// Costs fits every component's CPU over the steps that passed (a failed step's component may have
// been starved, a harness-limited one was not offered its load), leaving out a role's steps at
// its cap. With failedToo (the lease-only microbenchmark, a measure of cost, not of capacity) a
// step that missed an SLO counts too, when its load was delivered and its hold measured.
func Costs(steps []Step, failedToo bool) []Cost {
	type point struct{ nodes, cores float64 }
	points := map[string][]point{}
	costs := map[string]*Cost{}
	var largest *Step
	for i := range steps {
		st := &steps[i]
		if !st.Passed() && !(failedToo && st.Measured()) {
			continue
		}
		if largest == nil || st.Nodes > largest.Nodes {
			largest = st
		}
		capped := RolesAtCap(st.Usage)
		for _, u := range st.Usage {
			c := costs[u.Component]
			if c == nil {
				c = &Cost{Cost: capacity.Cost{Component: u.Component, Role: u.Role}}
				costs[u.Component] = c
			}
			c.Replicas = u.Processes
			if _, at := capped[u.Role]; at && u.Role != "" {
				c.CappedSteps = append(c.CappedSteps, st.Nodes)
				continue
			}
			points[u.Component] = append(points[u.Component], point{float64(st.Nodes), u.CPUCores})
		}
	}
	var out []Cost
	for component, c := range costs {
		var n, sx, sy, sxx, sxy float64
		for _, p := range points[component] {
			x := p.nodes / 1000
			n, sx, sy, sxx, sxy = n+1, sx+x, sy+p.cores, sxx+x*x, sxy+x*p.cores
			c.Steps = append(c.Steps, int(p.nodes))
		}
		if d := n*sxx - sx*sx; n > 1 && d > 0 {
			c.CoresPer1000Nodes = (n*sxy - sx*sy) / d
			c.BaseCores = (sy - c.CoresPer1000Nodes*sx) / n
		} else if sx > 0 {
			c.CoresPer1000Nodes = sy / sx
		}
		c.RequestsPerCore = requestsPerCore(largest, component)
		out = append(out, *c)
	}
	slices.SortFunc(out, func(a, b Cost) int { return strings.Compare(a.Component, b.Component) })
	return out
}

// RolesAtCap are the roles whose processes together used CapShare or more of their CPU cap, with
// the cores they used and the cap.
func RolesAtCap(usage []Usage) map[string][2]float64 {
	used, caps := map[string]float64{}, map[string]float64{}
	for _, u := range usage {
		if u.Role != "" {
			used[u.Role] += u.CPUCores
			caps[u.Role] = max(caps[u.Role], u.CPULimitCores)
		}
	}
	out := map[string][2]float64{}
	for role, limit := range caps {
		if limit > 0 && used[role] >= CapShare*limit {
			out[role] = [2]float64{used[role], limit}
		}
	}
	return out
}

// requestsPerCore is what a component served a second per core it used during the step's hold.
func requestsPerCore(st *Step, component string) float64 {
	var requests, cores float64
	switch component {
	case KindAPIServer:
		requests = st.APIServers.Requests
	case KindEtcdMain, KindEtcdEvents:
		for _, m := range st.Etcd {
			if m.Role == component {
				requests += m.Requests
			}
		}
	}
	for _, u := range st.Usage {
		if u.Component == component {
			cores = u.CPUCores
		}
	}
	if requests == 0 || cores == 0 || st.HeldSeconds == 0 {
		return 0
	}
	return requests / st.HeldSeconds / cores
}

// CapacityFigures are the run's costs as the capacity model reads them (components/capacity):
// the control-plane components' only, with where and when they were measured.
func CapacityFigures(s Summary, o Options) capacity.Figures {
	f := capacity.Figures{Date: s.Started.UTC().Format("2006-01-02"), Commit: o.Commit, Stack: s.Stack, Topology: s.Topology, Hold: o.Hold.String(),
		Machine: s.Machine.String()}
	for _, c := range s.Costs {
		if c.Role == "" {
			continue
		}
		f.Costs = append(f.Costs, c.Cost)
		if c.Component == KindAPIServer {
			f.Steps = c.Steps
		}
	}
	return f
}
