// Package drain empties a node through the eviction API, as `kubectl drain` does: every pod but
// DaemonSets' and static pods is evicted, and an eviction a PodDisruptionBudget refuses is asked
// again, never forced. The roller and the remediation controller drain the same way.
package drain

import (
	"context"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/client-go/kubernetes"
)

// reportEvery is how often a drain that waits says what holds it.
const reportEvery = 30 * time.Second

// Node evicts the node's pods until none that may be evicted is left, and returns how many
// evictions the apiserver accepted. It ends with ctx. While pods are left it calls logf, if not
// nil, every reportEvery with the count and the last refusal: a budget's refusal names the budget
// and its healthy pods, which is what an operator needs to see a roll that waits.
func Node(ctx context.Context, cs kubernetes.Interface, node string, logf func(format string, args ...any)) (int, error) {
	evicted := 0
	began, reported := time.Now(), time.Now()
	for {
		left, n, refused, err := evictOnce(ctx, cs, node)
		evicted += n
		if err != nil || left == 0 {
			return evicted, err
		}
		if logf != nil && time.Since(reported) >= reportEvery {
			reported = time.Now()
			logf("drain %s: %d pods left after %s; last refusal: %s", node, left, time.Since(began).Round(time.Second), refused)
		}
		select {
		case <-ctx.Done():
			return evicted, fmt.Errorf("drain %s: %w (%d pods left)", node, ctx.Err(), left)
		case <-time.After(500 * time.Millisecond):
		}
	}
}

// evictOnce asks once for every evictable pod of the node to be evicted; refused names the last
// pod a budget kept and why ("none" if no eviction was refused).
func evictOnce(ctx context.Context, cs kubernetes.Interface, node string) (left, evicted int, refused string, err error) {
	refused = "none"
	pods, err := cs.CoreV1().Pods("").List(ctx, metav1.ListOptions{FieldSelector: fields.OneTermEqualSelector("spec.nodeName", node).String()})
	if err != nil {
		return 0, 0, refused, err
	}
	for _, p := range pods.Items {
		if !Evictable(&p) {
			continue
		}
		left++
		if p.DeletionTimestamp != nil {
			continue // already going: wait for it
		}
		err := cs.PolicyV1().Evictions(p.Namespace).Evict(ctx, &policyv1.Eviction{ObjectMeta: metav1.ObjectMeta{Name: p.Name, Namespace: p.Namespace}})
		switch {
		case err == nil:
			evicted++
		case apierrors.IsNotFound(err):
		case apierrors.IsTooManyRequests(err): // a PodDisruptionBudget says not now
			refused = fmt.Sprintf("%s/%s: %s", p.Namespace, p.Name, refusal(err))
		case apierrors.HasStatusCause(err, corev1.NamespaceTerminatingCause):
			// No eviction is created in a namespace being deleted; its controller deletes the pod.
		default:
			return left, evicted, refused, err
		}
	}
	return left, evicted, refused, nil
}

// refusal is an eviction refusal's message and its causes: the apiserver puts the budget's name
// and healthy count in a cause ("The disruption budget coredns needs 1 healthy pods and has 1
// currently").
func refusal(err error) string {
	msg := err.Error()
	if st, ok := err.(apierrors.APIStatus); ok && st.Status().Details != nil {
		for _, c := range st.Status().Details.Causes {
			msg += "; " + c.Message
		}
	}
	return msg
}

// Evictable: a pod a drain must move. Finished pods, mirror pods and DaemonSets' pods stay.
func Evictable(p *corev1.Pod) bool {
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
