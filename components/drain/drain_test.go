package drain

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
)

func TestEvictableLeavesDaemonSetsMirrorsAndFinishedPods(t *testing.T) {
	for _, tc := range []struct {
		name string
		pod  corev1.Pod
		want bool
	}{
		{"a ReplicaSet's pod", corev1.Pod{ObjectMeta: metav1.ObjectMeta{OwnerReferences: []metav1.OwnerReference{{Kind: "ReplicaSet"}}}}, true},
		{"a bare pod", corev1.Pod{}, true},
		{"a DaemonSet's pod", corev1.Pod{ObjectMeta: metav1.ObjectMeta{OwnerReferences: []metav1.OwnerReference{{Kind: "DaemonSet"}}}}, false},
		{"a static pod's mirror", corev1.Pod{ObjectMeta: metav1.ObjectMeta{Annotations: map[string]string{corev1.MirrorPodAnnotationKey: "x"}}}, false},
		{"a finished pod", corev1.Pod{Status: corev1.PodStatus{Phase: corev1.PodSucceeded}}, false},
		{"a failed pod", corev1.Pod{Status: corev1.PodStatus{Phase: corev1.PodFailed}}, false},
	} {
		if got := Evictable(&tc.pod); got != tc.want {
			t.Errorf("%s: Evictable = %v, want %v", tc.name, got, tc.want)
		}
	}
}

// A pod already being deleted is waited for, not evicted again, and a pod in a namespace being
// deleted (where the apiserver creates no eviction) is waited for, not an error: the drain ends
// once both are gone.
func TestDrainWaitsForPodsAlreadyGoing(t *testing.T) {
	now := metav1.Now()
	pod := func(ns, name string, deleting bool) *corev1.Pod {
		p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, Finalizers: []string{"test/hold"}}, Spec: corev1.PodSpec{NodeName: "n1"}}
		if deleting {
			p.DeletionTimestamp = &now
		}
		return p
	}
	cs := fake.NewClientset(pod("a", "terminating", true), pod("gone-ns", "stays", false), pod("b", "evictable", false))
	var evictions []string
	cs.PrependReactor("create", "pods", func(action k8stesting.Action) (bool, runtime.Object, error) {
		if action.GetSubresource() != "eviction" {
			return false, nil, nil
		}
		evictions = append(evictions, action.GetNamespace())
		if action.GetNamespace() == "gone-ns" {
			err := apierrors.NewForbidden(corev1.Resource("pods"), "stays", errors.New("namespace gone-ns is being terminated"))
			err.ErrStatus.Details.Causes = []metav1.StatusCause{{Type: corev1.NamespaceTerminatingCause}}
			return true, nil, err
		}
		return true, nil, cs.Tracker().Delete(corev1.SchemeGroupVersion.WithResource("pods"), action.GetNamespace(), "evictable")
	})
	left, evicted, _, err := evictOnce(context.Background(), cs, "n1")
	if err != nil || left != 3 || evicted != 1 {
		t.Fatalf("evictOnce: %d left, %d evicted, %v; want 3 left, 1 evicted, no error", left, evicted, err)
	}
	if !slices.Equal(evictions, []string{"gone-ns", "b"}) && !slices.Equal(evictions, []string{"b", "gone-ns"}) {
		t.Errorf("evictions asked in %v, want gone-ns and b (never the pod already going)", evictions)
	}
	for _, p := range []string{"a/terminating", "gone-ns/stays"} { // their controllers finish them
		ns, name, _ := strings.Cut(p, "/")
		if err := cs.Tracker().Delete(corev1.SchemeGroupVersion.WithResource("pods"), ns, name); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := Node(context.Background(), cs, "n1", nil); err != nil {
		t.Errorf("drain after they went: %v", err)
	}
}

// A budget's refusal is reported with the cause the apiserver gives (its wording, as the eviction
// REST handler writes it), so a drain that waits names what holds it.
func TestDrainReportsWhatHoldsIt(t *testing.T) {
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "kube-system", Name: "coredns-1"}, Spec: corev1.PodSpec{NodeName: "n1"}}
	cs := fake.NewClientset(pod)
	cs.PrependReactor("create", "pods", func(action k8stesting.Action) (bool, runtime.Object, error) {
		err := apierrors.NewTooManyRequests("Cannot evict pod as it would violate the pod's disruption budget.", 0)
		err.ErrStatus.Details.Causes = []metav1.StatusCause{{Type: policyv1.DisruptionBudgetCause, Message: "The disruption budget coredns needs 1 healthy pods and has 1 currently"}}
		return true, nil, err
	})
	_, _, refused, err := evictOnce(context.Background(), cs, "n1")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(refused, "kube-system/coredns-1") || !strings.Contains(refused, "The disruption budget coredns needs 1 healthy pods") {
		t.Errorf("refusal reported as %q, want the pod and the budget's cause", refused)
	}
}
