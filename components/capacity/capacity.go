// Package capacity maps the control plane's measured CPU costs onto a stack's VM sizes: the
// cores each control-plane machine needs at the stack's targetNodes, from the scale benchmark's
// published figures (figures.json, written by `PUBLISH=1 make bench-scale`).
package capacity

import (
	_ "embed"
	"encoding/json"
	"fmt"
	"slices"

	"github.com/clusterforge/clusterforge/components/spec"
)

// Figures are one published scale benchmark's costs and where they come from.
type Figures struct {
	// Date, Commit and Machine say when, of what and where they were measured; Stack and
	// Topology what ran (the capacity topology: one machine of each role, each capped at its
	// cores), Hold how long each step was judged.
	Date     string `json:"date"`
	Commit   string `json:"commit"`
	Machine  string `json:"machine"`
	Stack    string `json:"stack"`
	Topology string `json:"topology"`
	Hold     string `json:"hold"`
	// Steps are the node counts the costs were fitted over.
	Steps []int  `json:"steps"`
	Costs []Cost `json:"costs"`
}

// Cost is one control-plane component's CPU as a line in the nodes: BaseCores +
// CoresPer1000Nodes × nodes/1000, measured on one machine of its role.
type Cost struct {
	// Component is the process; a server is named by its role (the apiserver "apiserver", an etcd
	// member its cluster's role).
	Component         string  `json:"component"`
	Role              string  `json:"role"`
	BaseCores         float64 `json:"baseCores"`
	CoresPer1000Nodes float64 `json:"coresPer1000Nodes"`
}

// Topology is the scale benchmark's shape whose costs are a machine's: one machine of each
// control-plane role, each capped at its cores. Costs of several machines of a role sharing cores
// are not one machine's.
const Topology = "capacity"

//go:embed figures.json
var published []byte

// Published are the figures checked in beside this package; false before any run was published.
func Published() (Figures, bool, error) {
	var f Figures
	if err := json.Unmarshal(published, &f); err != nil {
		return f, false, fmt.Errorf("capacity: figures.json: %w", err)
	}
	if len(f.Costs) > 0 && f.Topology != Topology {
		return f, false, fmt.Errorf("capacity: figures.json was measured on the %q topology, not one machine of each role (%q)", f.Topology, Topology)
	}
	return f, len(f.Costs) > 0, nil
}

// spread reports whether a component's work divides among its role's machines: the apiservers
// share the requests behind the load balancer. Every other component's work is a leader's, or,
// for an etcd member, every write: one machine carries all of it.
//
// What the model leaves out: a lone etcd member replicates to no follower, which an HA leader
// does, and serves every read, which HA members share; every apiserver keeps the whole watch
// cache and fans out every change, which dividing its cost by the machines under-counts.
func spread(component string) bool { return component == spec.RoleAPIServer }

// Need is what one machine of a control-plane role needs at a node count.
type Need struct {
	Role, VMSize string
	// Machines of the role; VCPUs of each.
	Machines, VCPUs int
	// Cores is the busiest machine's CPU: its components' base and their share of the nodes.
	Cores float64
}

// Share is the part of the machine's vCPUs the cores take (a measured core counted as a vCPU).
func (n Need) Share() float64 { return n.Cores / float64(n.VCPUs) }

// Needs is each control-plane role's busiest machine at nodes, from the figures' costs.
func Needs(c *spec.Cluster, f Figures, nodes int) ([]Need, error) {
	machines := map[string]struct {
		size  string
		count int
	}{
		spec.RoleAPIServer:  {c.APIServer.VMSize, c.APIServer.Count},
		spec.RoleEtcdMain:   {c.EtcdMain.VMSize, c.EtcdMain.Members},
		spec.RoleEtcdEvents: {c.EtcdEvents.VMSize, c.EtcdEvents.Members},
	}
	var out []Need
	for _, role := range []string{spec.RoleAPIServer, spec.RoleEtcdMain, spec.RoleEtcdEvents} {
		m := machines[role]
		vm, ok := spec.VMCapacity(m.size)
		if !ok {
			return nil, fmt.Errorf("capacity: %s VM size %s is not in spec's VM sizes", role, m.size)
		}
		n := Need{Role: role, VMSize: m.size, Machines: m.count, VCPUs: vm.CPUs}
		measured := false
		for _, cost := range f.Costs {
			if cost.Role != role {
				continue
			}
			measured = true
			load := cost.CoresPer1000Nodes * float64(nodes) / 1000
			if spread(cost.Component) {
				load /= float64(m.count)
			}
			n.Cores += cost.BaseCores + load
		}
		if !measured {
			return nil, fmt.Errorf("capacity: the figures measured no component of role %s", role)
		}
		out = append(out, n)
	}
	return out, nil
}

// Extrapolated reports whether nodes lies beyond the largest step the figures measured.
func (f Figures) Extrapolated(nodes int) bool {
	return len(f.Steps) == 0 || nodes > slices.Max(f.Steps)
}
