package roll

import (
	"context"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"

	"github.com/clusterforge/clusterforge/components/nodestatus"
)

// replaceWorkers rolls one batch of a pool: every node cordoned and drained through the
// eviction API (which honours PodDisruptionBudgets: a refused eviction is retried, never
// forced), replaced, Ready on the desired kubelet version and uncordoned.
func (r *Roller) replaceWorkers(ctx context.Context, nodes []string) error {
	cs, err := r.Target.Clientset()
	if err != nil {
		return err
	}
	for _, n := range nodes {
		if err := setUnschedulable(ctx, cs, n, true); err != nil {
			return err
		}
	}
	for _, n := range nodes {
		began := time.Now()
		evicted, err := drain(ctx, cs, n)
		if err != nil {
			return err
		}
		r.logf("%s: cordoned and drained in %s (%d pods evicted)", n, time.Since(began).Round(100*time.Millisecond), evicted)
	}
	replaced := time.Now()
	for _, n := range nodes {
		if err := r.Target.Replace(ctx, n); err != nil {
			return fmt.Errorf("replace %s: %w", n, err)
		}
		r.logf("%s: replaced, booted in %s", n, time.Since(replaced).Round(100*time.Millisecond))
	}
	want := r.Desired.Versions.Kubernetes
	for _, n := range nodes {
		if err := poll(ctx, n+" to be Ready on "+want, func() error {
			node, err := cs.CoreV1().Nodes().Get(ctx, n, metav1.GetOptions{})
			if err != nil {
				return err
			}
			if err := nodestatus.Ready(node, time.Now()); err != nil {
				return err
			}
			if v := node.Status.NodeInfo.KubeletVersion; v != want {
				return fmt.Errorf("kubelet %s", v)
			}
			return nil
		}); err != nil {
			return err
		}
		r.logf("%s: Ready on %s %s after the replacement began", n, want, time.Since(replaced).Round(100*time.Millisecond))
		if err := setUnschedulable(ctx, cs, n, false); err != nil {
			return err
		}
	}
	return nil
}

func setUnschedulable(ctx context.Context, cs *kubernetes.Clientset, node string, v bool) error {
	patch := fmt.Sprintf(`{"spec":{"unschedulable":%t}}`, v)
	_, err := cs.CoreV1().Nodes().Patch(ctx, node, types.StrategicMergePatchType, []byte(patch), metav1.PatchOptions{})
	return err
}

// drain evicts every pod of the node but DaemonSets' and static pods, retrying evictions a
// PodDisruptionBudget refuses, until none is left.
func drain(ctx context.Context, cs *kubernetes.Clientset, node string) (int, error) {
	evicted := 0
	err := poll(ctx, "drain "+node, func() error {
		pods, err := cs.CoreV1().Pods("").List(ctx, metav1.ListOptions{FieldSelector: fields.OneTermEqualSelector("spec.nodeName", node).String()})
		if err != nil {
			return err
		}
		left := 0
		for _, p := range pods.Items {
			if !evictable(&p) {
				continue
			}
			left++
			err := cs.PolicyV1().Evictions(p.Namespace).Evict(ctx, &policyv1.Eviction{ObjectMeta: metav1.ObjectMeta{Name: p.Name, Namespace: p.Namespace}})
			switch {
			case err == nil:
				evicted++
			case apierrors.IsNotFound(err):
			case apierrors.IsTooManyRequests(err): // a PodDisruptionBudget says not now
			default:
				return err
			}
		}
		if left > 0 {
			return fmt.Errorf("%d pods left", left)
		}
		return nil
	})
	return evicted, err
}

func evictable(p *corev1.Pod) bool {
	if p.Status.Phase == corev1.PodSucceeded || p.Status.Phase == corev1.PodFailed {
		return false
	}
	if _, mirror := p.Annotations[corev1.MirrorPodAnnotationKey]; mirror {
		return false
	}
	for _, o := range p.OwnerReferences {
		if o.Kind == "DaemonSet" {
			return false
		}
	}
	return true
}
