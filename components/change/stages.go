package change

import (
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/clusterforge/clusterforge/components/spec"
)

// Kind is how a stage replaces each of its machines.
type Kind string

const (
	// EtcdMember: leadership moved off the member, the member removed, its machine replaced on an
	// empty local disk, the replacement added as a learner, caught up and promoted.
	EtcdMember Kind = "etcd-member"
	// APIServer: out of the load balancer, replaced, healthy and back in rotation; the
	// controller-manager and scheduler leases move to survivors.
	APIServer Kind = "apiserver"
	// Workers: cordoned, drained within PodDisruptionBudgets, replaced, Ready.
	Workers Kind = "workers"
)

// Inventory lists the machines running now, per role, in a stable order.
type Inventory map[string][]string

// Stage is one role's machines, replaced batch by batch.
type Stage struct {
	Role string
	Kind Kind
	// Batches are replaced one after another; a worker pool's first batch is its canary, one machine.
	Batches [][]string
}

// Plan is a roll: what changes and the stages that apply it.
type Plan struct {
	Changes []Change
	Stages  []Stage
}

// ErrRefused is wrapped by NewPlan when a change is refused.
var ErrRefused = errors.New("refused")

// NewPlan computes the roll from the applied to the desired cluster over the machines running
// now; extra are changes the specs do not show (certificates due for renewal). Stage order: the events etcd (the canary of an etcd change), the main etcd, the
// apiservers, then every pool in the stack's order, so kubelets are never newer than the
// apiservers. It refuses, naming every refused change, when any is.
func NewPlan(applied, desired *spec.Cluster, inv Inventory, extra ...Change) (Plan, error) {
	p := Plan{Changes: append(Diff(applied, desired), extra...)}
	var refused []string
	for _, c := range p.Changes {
		if c.Class == Refused {
			refused = append(refused, fmt.Sprintf("%s (%s -> %s): %s", c.Field, show(c.From), show(c.To), c.Reason))
		}
	}
	if len(refused) > 0 {
		return p, fmt.Errorf("%w: %s", ErrRefused, strings.Join(refused, "; "))
	}
	rolled := RolledRoles(desired, p.Changes)
	for _, role := range rollOrder(desired) {
		if !slices.Contains(rolled, role) || len(inv[role]) == 0 {
			continue
		}
		p.Stages = append(p.Stages, stageFor(role, inv[role]))
	}
	return p, nil
}

func rollOrder(c *spec.Cluster) []string {
	order := []string{spec.RoleEtcdEvents, spec.RoleEtcdMain, spec.RoleAPIServer}
	for _, p := range c.Pools {
		order = append(order, spec.WorkerRole(p.Name))
	}
	return order
}

func stageFor(role string, machines []string) Stage {
	switch role {
	case spec.RoleEtcdMain, spec.RoleEtcdEvents:
		return Stage{Role: role, Kind: EtcdMember, Batches: batches(machines, 0, 1)}
	case spec.RoleAPIServer:
		return Stage{Role: role, Kind: APIServer, Batches: batches(machines, 0, 1)}
	default:
		return Stage{Role: role, Kind: Workers, Batches: batches(machines, 1, spec.RollBatch(len(machines)))}
	}
}

// batches splits machines into a canary batch of canary machines (if any), then batches of size.
func batches(machines []string, canary, size int) [][]string {
	var out [][]string
	rest := machines
	if canary > 0 && len(rest) > 0 {
		n := min(canary, len(rest))
		out, rest = append(out, rest[:n:n]), rest[n:]
	}
	for len(rest) > 0 {
		n := min(size, len(rest))
		out, rest = append(out, rest[:n:n]), rest[n:]
	}
	return out
}

// Machines lists the plan's machines in the order they are replaced.
func (p Plan) Machines() []string {
	var out []string
	for _, s := range p.Stages {
		for _, b := range s.Batches {
			out = append(out, b...)
		}
	}
	return out
}

// Renewal is the change a renewal of the leaf certificates makes, which the specs do not show:
// every machine holds leaves in its user-data, so every role rolls. why says what is due.
func Renewal(c *spec.Cluster, why string) Change {
	return Change{Field: "certificates", From: why, To: "renewed", Class: Roll, Roles: rollOrder(c),
		Reason: "leaves are re-issued from the same authorities and reach a machine only through its user-data: every machine is replaced"}
}
