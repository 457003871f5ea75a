package preflight

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/clusterforge/clusterforge/components/nodestatus"
	"github.com/clusterforge/clusterforge/components/wellknown"
)

// FailedCondition is the node condition a failed pass sets True (and a passing one False);
// remediation replaces a node whose condition stays True (L35).
const FailedCondition corev1.NodeConditionType = wellknown.PreflightFailedCondition

// Agent tests its own node.
type Agent struct {
	Client   kubernetes.Interface
	NodeName string
	Tests    []Test
	// PerTest bounds each test.
	PerTest time.Duration
}

// Pass tests the node if it carries the preflight taint: on success the taint is removed and
// the condition set False; on failure the taint stays and the condition is set True with the
// failed test's message. A node without the taint is left alone. It returns the tests' failure.
func (a *Agent) Pass(ctx context.Context) error {
	node, err := a.Client.CoreV1().Nodes().Get(ctx, a.NodeName, metav1.GetOptions{})
	if err != nil {
		return err
	}
	if !Pending(node) {
		return nil
	}
	failed := RunAll(ctx, a.Tests, a.PerTest)
	cond := corev1.NodeCondition{Type: FailedCondition, Status: corev1.ConditionFalse, Reason: "PreflightPassed",
		Message: fmt.Sprintf("%d preflight tests passed", len(a.Tests))}
	var f *Failure
	if errors.As(failed, &f) {
		cond.Status, cond.Reason, cond.Message = corev1.ConditionTrue, "PreflightTestFailed", f.Error()
	} else if failed != nil {
		return failed // the agent's own context ended: no verdict
	}
	if err := nodestatus.SetCondition(ctx, a.Client, a.NodeName, cond); err != nil {
		return err
	}
	if failed != nil {
		return failed
	}
	return a.removeTaint(ctx)
}

// Pending says whether the node waits for its preflight tests.
func Pending(n *corev1.Node) bool {
	return slices.ContainsFunc(n.Spec.Taints, func(t corev1.Taint) bool { return t.Key == wellknown.PreflightTaint })
}

// removeTaint takes the preflight taint off, retrying on a conflicting write.
func (a *Agent) removeTaint(ctx context.Context) error {
	for range 5 {
		node, err := a.Client.CoreV1().Nodes().Get(ctx, a.NodeName, metav1.GetOptions{})
		if err != nil {
			return err
		}
		if !Pending(node) {
			return nil
		}
		node.Spec.Taints = slices.DeleteFunc(node.Spec.Taints, func(t corev1.Taint) bool { return t.Key == wellknown.PreflightTaint })
		_, err = a.Client.CoreV1().Nodes().Update(ctx, node, metav1.UpdateOptions{})
		if !apierrors.IsConflict(err) {
			return err
		}
	}
	return fmt.Errorf("node %s kept changing: preflight taint not removed", a.NodeName)
}
