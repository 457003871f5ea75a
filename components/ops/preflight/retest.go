package preflight

import (
	"context"
	"fmt"

	"github.com/clusterforge/clusterforge/components/wellknown"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/client-go/kubernetes"
)

// Retest is the periodic re-test (a CronJob, one pod for the cluster): idle nodes the selector
// picks get the preflight taint back and their agent pod is deleted, so the DaemonSet starts a
// new one that tests the node again. At most MaxFraction of the selected nodes (at least one) a
// run, so capacity is never all under test at once.
type Retest struct {
	Client kubernetes.Interface
	// Nodes selects the nodes to re-test (the GPU pools' label).
	Nodes string
	// Agents selects the preflight agent's pods (its DaemonSet's label), in AgentNamespace.
	Agents, AgentNamespace string
	MaxFraction            float64
}

// Run re-tests up to its share of idle nodes and returns their names.
func (r *Retest) Run(ctx context.Context) ([]string, error) {
	nodes, err := r.Client.CoreV1().Nodes().List(ctx, metav1.ListOptions{LabelSelector: r.Nodes, ResourceVersion: "0"})
	if err != nil {
		return nil, err
	}
	limit := max(1, int(r.MaxFraction*float64(len(nodes.Items))))
	var retested []string
	for i := range nodes.Items {
		if len(retested) >= limit {
			break
		}
		n := &nodes.Items[i]
		if Pending(n) || n.Spec.Unschedulable {
			continue
		}
		idle, err := r.idle(ctx, n.Name)
		if err != nil {
			return retested, err
		}
		if !idle {
			continue
		}
		n.Spec.Taints = append(n.Spec.Taints, corev1.Taint{Key: wellknown.PreflightTaint, Value: wellknown.PreflightPending, Effect: corev1.TaintEffectNoSchedule})
		if _, err := r.Client.CoreV1().Nodes().Update(ctx, n, metav1.UpdateOptions{}); apierrors.IsConflict(err) {
			continue // it changed since the list: the next run looks again
		} else if err != nil {
			return retested, fmt.Errorf("taint %s for re-test: %w", n.Name, err)
		}
		err = r.Client.CoreV1().Pods(r.AgentNamespace).DeleteCollection(ctx, metav1.DeleteOptions{},
			metav1.ListOptions{LabelSelector: r.Agents, FieldSelector: fields.OneTermEqualSelector("spec.nodeName", n.Name).String()})
		if err != nil {
			return retested, fmt.Errorf("restart %s's preflight agent: %w", n.Name, err)
		}
		retested = append(retested, n.Name)
	}
	return retested, nil
}

// idle says whether only DaemonSet and static pods run on the node: taking it for a test
// delays no one's work.
func (r *Retest) idle(ctx context.Context, node string) (bool, error) {
	pods, err := r.Client.CoreV1().Pods(metav1.NamespaceAll).List(ctx, metav1.ListOptions{
		FieldSelector: fields.OneTermEqualSelector("spec.nodeName", node).String(), ResourceVersion: "0"})
	if err != nil {
		return false, err
	}
	for _, p := range pods.Items {
		if p.Status.Phase == corev1.PodSucceeded || p.Status.Phase == corev1.PodFailed {
			continue
		}
		if owner := metav1.GetControllerOf(&p); owner != nil && (owner.Kind == "DaemonSet" || owner.Kind == "Node") {
			continue
		}
		return false, nil
	}
	return true, nil
}
