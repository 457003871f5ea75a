// Package remediation replaces broken machines (L35): a node whose health condition stays bad for
// a grace period is marked for replacement (cordoned and tainted, which the scale-down brake
// admits or refuses), drained through the eviction API, and its machine removed once it is empty
// or its hand-back time has come. A marked node that stays healthy for the grace period is
// unmarked; nothing is marked while too many nodes are unhealthy at once (cluster-api's
// MachineHealthCheck maxUnhealthy): a failure that wide is the network's, the control plane's or
// a zone's. One zone's outage holds marking in that zone; the others keep being repaired while
// nothing else fails beside it.
package remediation

import (
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/clusterforge/clusterforge/components/ops/brake"
	"github.com/clusterforge/clusterforge/components/ops/maintenance"
	"github.com/clusterforge/clusterforge/components/wellknown"
)

// Problem is a node condition that means the machine is broken when it has Status.
type Problem struct {
	Type   corev1.NodeConditionType
	Status corev1.ConditionStatus
}

// Policy says what is broken and how long to wait.
type Policy struct {
	// Problems are the conditions that mark a node. Default: node-problem-detector's
	// KernelDeadlock and ReadonlyFilesystem, clusterforge's NetworkProblem, PreflightFailed and
	// GPUProblem, and Ready False or Unknown.
	Problems []Problem
	// Grace is how long a problem must last before the node is marked. Default 5 minutes: longer
	// than a kubelet restart or a node controller's 40 s grace, so a blip marks nothing.
	Grace time.Duration
	// HandBack is how long after marking the machine is removed even if pods a
	// PodDisruptionBudget protects are still on it. Default 24 hours (the seeds waited 7 days for
	// jobs to finish; a fleet of spot-priced GPUs waits less).
	HandBack time.Duration
	// Maintenance are the conditions of planned maintenance (L37): the node is cordoned and
	// drained at once, and uncordoned when the condition clears; the machine stays. Default:
	// MaintenanceScheduled=True, set from Azure's Scheduled Events.
	Maintenance []Problem
	// ZoneMaxUnhealthy is the share of a zone's nodes (topology.kubernetes.io/zone, every pool's)
	// above which the zone is out (TooManyUnhealthy). Default 0.5; 1 turns the zone check off.
	ZoneMaxUnhealthy float64
	// MaxUnhealthy is the share of a pool's nodes, and of the cluster's, above which nothing is
	// marked, and, while a zone is out, of each pool's nodes in every other zone. A node counts when
	// it has a problem (within its grace or not) or is marked already; at least one is always
	// allowed, so a small pool stays repairable. Default 0.4; 1 turns the check off. The ops
	// controller runs with the stack's spec.RemediationMaxUnhealthy.
	MaxUnhealthy float64
}

// DefaultPolicy is L35's remediation.
func DefaultPolicy() Policy {
	return Policy{
		Problems: []Problem{
			{wellknown.KernelDeadlockCondition, corev1.ConditionTrue},
			{wellknown.ReadonlyFilesystemCondition, corev1.ConditionTrue},
			{wellknown.NetworkProblemCondition, corev1.ConditionTrue},
			{wellknown.PreflightFailedCondition, corev1.ConditionTrue},
			{wellknown.GPUProblemCondition, corev1.ConditionTrue},
			{corev1.NodeReady, corev1.ConditionFalse},
			{corev1.NodeReady, corev1.ConditionUnknown},
		},
		Grace:            5 * time.Minute,
		HandBack:         24 * time.Hour,
		Maintenance:      []Problem{{maintenance.Condition, corev1.ConditionTrue}},
		ZoneMaxUnhealthy: 0.5,
		MaxUnhealthy:     0.4,
	}
}

// Validate names a bad field.
func (p Policy) Validate() error {
	switch {
	case len(p.Problems) == 0:
		return fmt.Errorf("remediation: Problems is empty: name at least one condition, e.g. KernelDeadlock=True")
	case p.Grace <= 0:
		return fmt.Errorf("remediation: Grace %s: want a positive duration, e.g. 5m", p.Grace)
	case p.HandBack <= 0:
		return fmt.Errorf("remediation: HandBack %s: want a positive duration, e.g. 24h", p.HandBack)
	case !(p.MaxUnhealthy > 0 && p.MaxUnhealthy <= 1):
		return fmt.Errorf("remediation: MaxUnhealthy %v: want a share above 0 and at most 1, e.g. 0.4", p.MaxUnhealthy)
	case !(p.ZoneMaxUnhealthy > 0 && p.ZoneMaxUnhealthy <= 1):
		return fmt.Errorf("remediation: ZoneMaxUnhealthy %v: want a share above 0 and at most 1, e.g. 0.5", p.ZoneMaxUnhealthy)
	}
	return nil
}

// Step is what the controller does next with a node.
type Step int

const (
	// Wait: nothing to do now; look again at the returned time (zero: on the next change).
	Wait Step = iota
	// Mark the node: cordon, the replace taint, the annotations.
	Mark
	// Drain the marked node, then hand it back once empty.
	Drain
	// HandBack: remove the machine now, drained or not.
	HandBack
	// Evacuate: cordon the node ahead of planned maintenance and drain it.
	Evacuate
	// Restore: the maintenance is over; lift the cordon Evacuate set.
	Restore
	// Unmark: the marked node has been healthy for the grace period; lift the mark.
	Unmark
)

// Next is the step for node at now, with the reason for Mark and Evacuate and, for Wait, when to
// look again. A broken node is replaced even while maintenance is due; a node someone else
// cordoned (the roller replacing it, an operator) is left alone until they uncordon it.
func (p Policy) Next(n *corev1.Node, now time.Time) (step Step, reason string, again time.Time) {
	if marked(n) && p.healthyFor(n, now) {
		return Unmark, "", time.Time{}
	}
	if marked(n) {
		since, err := time.Parse(time.RFC3339, n.Annotations[wellknown.SinceAnnotation])
		if err != nil || now.Sub(since) >= p.HandBack {
			return HandBack, "", time.Time{}
		}
		return Drain, "", since.Add(p.HandBack)
	}
	if _, evacuated := n.Annotations[wellknown.EvacuateAnnotation]; n.Spec.Unschedulable && !evacuated {
		return Wait, "", time.Time{} // cordoned by someone else (a roll, an operator): theirs to finish
	}
	if slices.ContainsFunc(n.Spec.Taints, func(t corev1.Taint) bool { return t.Key == wellknown.AutoscalerDeletionTaint }) {
		return Wait, "", time.Time{} // cluster-autoscaler is removing it (it marks, it does not cordon)
	}
	for _, c := range n.Status.Conditions {
		if !p.problem(c) {
			continue
		}
		due := c.LastTransitionTime.Add(p.Grace)
		if !now.Before(due) {
			return Mark, fmt.Sprintf("%s=%s since %s: %s", c.Type, c.Status, c.LastTransitionTime.UTC().Format(time.RFC3339), c.Message), time.Time{}
		}
		if again.IsZero() || due.Before(again) {
			again = due
		}
	}
	for _, c := range n.Status.Conditions {
		if slices.Contains(p.Maintenance, Problem{c.Type, c.Status}) {
			return Evacuate, fmt.Sprintf("%s=%s: %s", c.Type, c.Status, c.Message), time.Time{}
		}
	}
	if _, ok := n.Annotations[wellknown.EvacuateAnnotation]; ok {
		return Restore, "", time.Time{}
	}
	return Wait, "", again
}

// healthyFor: Ready, no problem now, and none of the problem conditions changed within the grace.
func (p Policy) healthyFor(n *corev1.Node, now time.Time) bool {
	if !slices.ContainsFunc(n.Status.Conditions, func(c corev1.NodeCondition) bool {
		return c.Type == corev1.NodeReady && c.Status == corev1.ConditionTrue
	}) {
		return false
	}
	for _, c := range n.Status.Conditions {
		watched := slices.ContainsFunc(p.Problems, func(pr Problem) bool { return pr.Type == c.Type })
		if watched && (p.problem(c) || now.Sub(c.LastTransitionTime.Time) < p.Grace) {
			return false
		}
	}
	return true
}

func (p Policy) problem(c corev1.NodeCondition) bool {
	return slices.Contains(p.Problems, Problem{c.Type, c.Status})
}

// unhealthy: a problem now, within its grace or past it, or marked already.
func (p Policy) unhealthy(n *corev1.Node) bool {
	return marked(n) || slices.ContainsFunc(n.Status.Conditions, p.problem)
}

// TooManyUnhealthy says why node may not be marked now; nodes are all the cluster's. A zone
// (topology.kubernetes.io/zone) is out when more than ZoneMaxUnhealthy of its nodes, every pool's,
// are unhealthy. Then:
//   - more than one zone out, or every zone: nothing is marked (a failure wider than a zone);
//   - node's own zone out: it is not marked (the zone's outage is Azure's, not the machines');
//   - another zone out: each pool's nodes in every other zone, the unlabelled ones, each pool
//     outside the zone and the cluster outside it are judged at MaxUnhealthy, so a second failure
//     beside the outage holds marking too;
//   - no zone out: more than MaxUnhealthy of node's pool, or of the cluster, holds it.
func (p Policy) TooManyUnhealthy(nodes []*corev1.Node, node *corev1.Node) error {
	type count struct{ bad, all int }
	add := func(c count, bad bool) count {
		if bad {
			c.bad++
		}
		return count{c.bad, c.all + 1}
	}
	over := func(c count, share float64) bool { return c.bad > max(1, int(share*float64(c.all))) }
	type group struct{ pool, zone string }
	zones, groups := map[string]count{}, map[group]count{}
	var pool, cluster count
	ownPool, ownZone := node.Labels[wellknown.PoolLabel], node.Labels[wellknown.ZoneLabel]
	for _, n := range nodes {
		bad, g := p.unhealthy(n), group{n.Labels[wellknown.PoolLabel], n.Labels[wellknown.ZoneLabel]}
		if g.zone != "" {
			zones[g.zone] = add(zones[g.zone], bad)
		}
		groups[g] = add(groups[g], bad)
		cluster = add(cluster, bad)
		if g.pool == ownPool {
			pool = add(pool, bad)
		}
	}
	var out []string
	for zone, c := range zones {
		if over(c, p.ZoneMaxUnhealthy) {
			out = append(out, zone)
		}
	}
	slices.Sort(out)
	switch {
	case len(out) > 1 || (len(out) == 1 && len(zones) == 1):
		return fmt.Errorf("zones %s each have more than %.0f%% of their nodes unhealthy, and no other zone is whole: remediation marks nothing until fewer are (a failure wider than a zone is rarely the machines')",
			strings.Join(out, ", "), 100*p.ZoneMaxUnhealthy)
	case len(out) == 1 && out[0] == ownZone:
		c := zones[ownZone]
		return fmt.Errorf("%d of zone %s's %d nodes are unhealthy, more than %.0f%%: the zone is out, and remediation marks nothing in it until fewer are (its outage is Azure's, not the machines')",
			c.bad, ownZone, c.all, 100*p.ZoneMaxUnhealthy)
	case len(out) == 1:
		var rest count              // the cluster outside the zone
		pools := map[string]count{} // each pool outside the zone
		for _, g := range slices.SortedFunc(maps.Keys(groups), func(a, b group) int { return strings.Compare(a.pool+"/"+a.zone, b.pool+"/"+b.zone) }) {
			c := groups[g]
			if g.zone == out[0] {
				continue
			}
			if over(c, p.MaxUnhealthy) {
				return fmt.Errorf("zone %s is out, and %d of pool %s's %d nodes in zone %q are unhealthy too, more than %.0f%%: remediation marks nothing until fewer are (a second failure beside a zone's outage is rarely the machines')",
					out[0], c.bad, g.pool, c.all, g.zone, 100*p.MaxUnhealthy)
			}
			pools[g.pool] = count{pools[g.pool].bad + c.bad, pools[g.pool].all + c.all}
			rest = count{rest.bad + c.bad, rest.all + c.all}
		}
		for _, name := range slices.Sorted(maps.Keys(pools)) {
			if c := pools[name]; over(c, p.MaxUnhealthy) {
				return fmt.Errorf("zone %s is out, and %d of pool %s's %d nodes elsewhere are unhealthy too, more than %.0f%%: remediation marks nothing until fewer are",
					out[0], c.bad, name, c.all, 100*p.MaxUnhealthy)
			}
		}
		if over(rest, p.MaxUnhealthy) {
			return fmt.Errorf("zone %s is out, and %d of the cluster's %d nodes elsewhere are unhealthy too, more than %.0f%%: remediation marks nothing until fewer are",
				out[0], rest.bad, rest.all, 100*p.MaxUnhealthy)
		}
		return nil
	}
	for _, scope := range []struct {
		name string
		count
	}{{"pool " + ownPool, pool}, {"the cluster", cluster}} {
		if over(scope.count, p.MaxUnhealthy) {
			return fmt.Errorf("%d of %s's %d nodes are unhealthy, more than %.0f%%: remediation marks nothing until fewer are (a failure this wide is rarely the machines')",
				scope.bad, scope.name, scope.all, 100*p.MaxUnhealthy)
		}
	}
	return nil
}

func marked(n *corev1.Node) bool {
	return slices.ContainsFunc(n.Spec.Taints, func(t corev1.Taint) bool { return t.Key == brake.ReplaceTaint })
}
