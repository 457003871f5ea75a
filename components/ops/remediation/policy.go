// Package remediation replaces broken machines (L35): a node whose health condition stays bad for
// a grace period is marked for replacement (cordoned and tainted, which the scale-down brake
// admits or refuses), drained through the eviction API, and its machine removed once it is empty
// or its hand-back time has come. A marked node that stays healthy for the grace period is
// unmarked; nothing is marked while too many nodes are unhealthy at once (cluster-api's
// MachineHealthCheck maxUnhealthy): a failure that wide is the network's, the control plane's or
// a zone's. A zone's outage holds marking in that zone only: the others keep being repaired.
package remediation

import (
	"fmt"
	"slices"
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
	// ZoneMaxUnhealthy is the share of a pool's nodes in one zone (topology.kubernetes.io/zone)
	// above which that zone is out: nothing in it is marked, and the checks below leave its nodes
	// out (nodes without the label are one zone of their pool, never left out). A node counts when it has a problem (within its grace or not) or is marked already; at
	// least one unhealthy node is always allowed, so a small pool stays repairable. Default 0.5.
	ZoneMaxUnhealthy float64
	// MaxUnhealthy is the share of a pool's nodes, and of the cluster's, in the zones not out,
	// above which nothing is marked: a failure spread across zones. Default 0.4; 1 turns the
	// check off. The ops controller runs with the stack's spec.RemediationMaxUnhealthy.
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

// TooManyUnhealthy says why node may not be marked now: more than ZoneMaxUnhealthy of its pool's
// nodes in its zone are unhealthy, or more than MaxUnhealthy of its pool's or the cluster's nodes
// in the zones not out. nodes are all the cluster's.
func (p Policy) TooManyUnhealthy(nodes []*corev1.Node, node *corev1.Node) error {
	type place struct{ pool, zone string }
	where := func(n *corev1.Node) place { return place{n.Labels[wellknown.PoolLabel], n.Labels[wellknown.ZoneLabel]} }
	type count struct{ bad, all int }
	over := func(c count, share float64) bool { return c.bad > max(1, int(share*float64(c.all))) }
	zones := map[place]count{}
	for _, n := range nodes {
		c := zones[where(n)]
		c.all++
		if p.unhealthy(n) {
			c.bad++
		}
		zones[where(n)] = c
	}
	own := where(node)
	if c := zones[own]; over(c, p.ZoneMaxUnhealthy) {
		return fmt.Errorf("%d of pool %s's %d nodes in zone %q are unhealthy, more than %.0f%%: remediation marks nothing there until fewer are (a failure this wide is the zone's, not the machines')",
			c.bad, own.pool, c.all, own.zone, 100*p.ZoneMaxUnhealthy)
	}
	var pool, cluster count
	for at, c := range zones {
		if at.zone != "" && over(c, p.ZoneMaxUnhealthy) {
			continue // the zone is out: its own check holds it
		}
		cluster.bad, cluster.all = cluster.bad+c.bad, cluster.all+c.all
		if at.pool == own.pool {
			pool.bad, pool.all = pool.bad+c.bad, pool.all+c.all
		}
	}
	for _, scope := range []struct {
		name string
		count
	}{{"pool " + own.pool, pool}, {"the cluster", cluster}} {
		if over(scope.count, p.MaxUnhealthy) {
			return fmt.Errorf("%d of %s's %d nodes in zones not out are unhealthy, more than %.0f%%: remediation marks nothing until fewer are (a failure this wide is rarely the machines')",
				scope.bad, scope.name, scope.all, 100*p.MaxUnhealthy)
		}
	}
	return nil
}

func marked(n *corev1.Node) bool {
	return slices.ContainsFunc(n.Spec.Taints, func(t corev1.Taint) bool { return t.Key == brake.ReplaceTaint })
}
