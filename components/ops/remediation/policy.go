// Package remediation replaces broken machines (L35): a node whose health condition stays bad for
// a grace period is marked for replacement (cordoned and tainted, which the scale-down brake
// admits or refuses), drained through the eviction API, and its machine removed once it is empty
// or its hand-back time has come.
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
}

// DefaultPolicy is L35's remediation.
func DefaultPolicy() Policy {
	return Policy{
		Problems: []Problem{
			{"KernelDeadlock", corev1.ConditionTrue},
			{"ReadonlyFilesystem", corev1.ConditionTrue},
			{"NetworkProblem", corev1.ConditionTrue},
			{"PreflightFailed", corev1.ConditionTrue},
			{"GPUProblem", corev1.ConditionTrue},
			{corev1.NodeReady, corev1.ConditionFalse},
			{corev1.NodeReady, corev1.ConditionUnknown},
		},
		Grace:       5 * time.Minute,
		HandBack:    24 * time.Hour,
		Maintenance: []Problem{{maintenance.Condition, corev1.ConditionTrue}},
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
)

// Next is the step for node at now, with the reason for Mark and Evacuate and, for Wait, when to
// look again. A broken node is replaced even while maintenance is due; a node someone else
// cordoned (the roller replacing it, an operator) is left alone until they uncordon it.
func (p Policy) Next(n *corev1.Node, now time.Time) (step Step, reason string, again time.Time) {
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
	for _, c := range n.Status.Conditions {
		if !slices.Contains(p.Problems, Problem{c.Type, c.Status}) {
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

func marked(n *corev1.Node) bool {
	return slices.ContainsFunc(n.Spec.Taints, func(t corev1.Taint) bool { return t.Key == brake.ReplaceTaint })
}
