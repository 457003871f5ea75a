package teams

import (
	"context"
	"encoding/json"
	"maps"
	"strings"
	"testing"

	jsonpatch "gopkg.in/evanphx/json-patch.v4"
	admissionv1 "k8s.io/api/admission/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/klog/v2"

	"github.com/clusterforge/clusterforge/components/wellknown"
)

func TestParseAllocationsNamesEachBadField(t *testing.T) {
	_, err := ParseAllocations(`
- team: "Bad Team!"
  nodeSelector: {node-restriction.kubernetes.io/clusterforge-pool: gpu}
  nodes: 2
- team: b
  nodes: -1
`)
	for _, want := range []string{`[0].team "Bad Team!"`, "[1].nodeSelector: pick the nodes", "[1].nodes -1"} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("ParseAllocations: %v; want it to name %q", err, want)
		}
	}
	if _, err := ParseAllocations("- team: a\n  nodeSelector: {pool: gpu}\n  node: 2\n"); err == nil || !strings.Contains(err.Error(), "field node not found") {
		t.Errorf("a misspelt field: %v, want it refused", err)
	}
	got, err := ParseAllocations("")
	if err != nil || len(got) != 0 {
		t.Errorf("an empty ConfigMap: %v, %v; want no allocations", got, err)
	}
}

func node(name, pool, team string) *corev1.Node {
	n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{"pool": pool}}}
	if team != "" {
		n.Spec.Taints = []corev1.Taint{{Key: TaintKey, Value: team, Effect: corev1.TaintEffectNoSchedule}}
	}
	return n
}

func TestOwnersKeepWhatEachTeamHasAndShareTheRest(t *testing.T) {
	nodes := []*corev1.Node{node("n1", "gpu", ""), node("n2", "gpu", "b"), node("n3", "gpu", ""), node("n4", "gpu", "a"), node("n5", "gpu", ""), node("c1", "cpu", "")}
	allocs := []Allocation{{Team: "a", NodeSelector: map[string]string{"pool": "gpu"}, Nodes: 2}, {Team: "b", NodeSelector: map[string]string{"pool": "gpu"}, Nodes: 1}}
	owners, short := Owners(allocs, nodes)
	want := map[string]string{"n4": "a", "n1": "a", "n2": "b"}
	if !maps.Equal(owners, want) || len(short) != 0 {
		t.Errorf("owners %v (short %v), want %v: a's n4 and b's n2 kept, a's second node the first free by name", owners, short, want)
	}
	// b grows past the pool: it takes every free node and says it is short; a keeps its two.
	allocs[1].Nodes = 5
	owners, short = Owners(allocs, nodes)
	if owners["n4"] != "a" || owners["n1"] != "a" || owners["n2"] != "b" || owners["n3"] != "b" || owners["n5"] != "b" || owners["c1"] != "" {
		t.Errorf("owners %v", owners)
	}
	if len(short) != 1 || !strings.Contains(short[0].Error(), "team b: 5 nodes allocated, 3 match") {
		t.Errorf("short %v, want team b reported", short)
	}
}

// An allocation that selects every node leaves the system pool's alone.
func TestOwnersLeaveTheSystemPool(t *testing.T) {
	sys := node("s1", "system", "")
	sys.Spec.Taints = []corev1.Taint{{Key: wellknown.SystemTaint, Value: "true", Effect: corev1.TaintEffectNoSchedule}}
	owners, short := Owners([]Allocation{{Team: "a", NodeSelector: map[string]string{"kubernetes.io/os": "linux"}, Nodes: 2}},
		[]*corev1.Node{withLabel(sys, "kubernetes.io/os", "linux"), withLabel(node("c1", "cpu", ""), "kubernetes.io/os", "linux")})
	if !maps.Equal(owners, map[string]string{"c1": "a"}) || len(short) != 1 {
		t.Errorf("owners %v (short %v), want c1 alone, and team a reported short", owners, short)
	}
}

func withLabel(n *corev1.Node, key, value string) *corev1.Node {
	n.Labels[key] = value
	return n
}

func TestWithOwner(t *testing.T) {
	n := node("n1", "gpu", "a")
	n.Spec.Taints = append(n.Spec.Taints, corev1.Taint{Key: "nvidia.com/gpu", Value: "present", Effect: corev1.TaintEffectNoSchedule})
	if _, changed := WithOwner(n, "a"); changed {
		t.Error("the same owner changed the taints")
	}
	taints, changed := WithOwner(n, "b")
	if !changed || len(taints) != 2 || taints[0].Key != "nvidia.com/gpu" || taints[1].Value != "b" {
		t.Errorf("a to b: %v", taints)
	}
	if taints, _ := WithOwner(n, ""); len(taints) != 1 || taints[0].Key != "nvidia.com/gpu" {
		t.Errorf("shared: %v, want only the GPU taint", taints)
	}
	if TeamOf(n) != "a" {
		t.Error("WithOwner changed the node it was given")
	}
}

// review runs the webhook on a pod and applies its JSON patch with evanphx/json-patch, as the
// apiserver does.
func review(t *testing.T, w *Webhook, ns string, pod corev1.Pod) corev1.Pod {
	t.Helper()
	raw, err := json.Marshal(pod)
	if err != nil {
		t.Fatal(err)
	}
	resp := w.Review(context.Background(), &admissionv1.AdmissionRequest{Kind: metav1.GroupVersionKind{Version: "v1", Kind: "Pod"},
		Operation: admissionv1.Create, Namespace: ns, Object: runtime.RawExtension{Raw: raw}})
	if !resp.Allowed {
		t.Fatalf("refused: %v", resp.Result)
	}
	if resp.Patch == nil {
		return pod
	}
	p, err := jsonpatch.DecodePatch(resp.Patch)
	if err != nil {
		t.Fatal(err)
	}
	out, err := p.Apply(raw)
	if err != nil {
		t.Fatalf("patch %s: %v", resp.Patch, err)
	}
	var patched corev1.Pod
	if err := json.Unmarshal(out, &patched); err != nil {
		t.Fatal(err)
	}
	return patched
}

func TestWebhookAddsTheTeamsAndTheBorrowersTolerations(t *testing.T) {
	w := &Webhook{BorrowPriorityClass: "borrow", NamespaceTeam: func(ns string) (string, error) {
		return map[string]string{"research": "a"}[ns], nil
	}}
	tolerates := func(p corev1.Pod, team string) bool {
		taint := corev1.Taint{Key: TaintKey, Value: team, Effect: corev1.TaintEffectNoSchedule}
		for _, tol := range p.Spec.Tolerations {
			if tol.ToleratesTaint(klog.Background(), &taint, false) {
				return true
			}
		}
		return false
	}
	own := review(t, w, "research", corev1.Pod{})
	if !tolerates(own, "a") || tolerates(own, "b") {
		t.Errorf("team a's pod: %v; want a's nodes only", own.Spec.Tolerations)
	}
	existing := corev1.Toleration{Key: "nvidia.com/gpu", Operator: corev1.TolerationOpExists}
	borrower := review(t, w, "research", corev1.Pod{Spec: corev1.PodSpec{PriorityClassName: "borrow", Tolerations: []corev1.Toleration{existing}}})
	if !tolerates(borrower, "a") || !tolerates(borrower, "b") || borrower.Spec.Tolerations[0] != existing {
		t.Errorf("a borrower: %v; want every team's nodes, its own toleration kept first", borrower.Spec.Tolerations)
	}
	if again := review(t, w, "research", own); len(again.Spec.Tolerations) != len(own.Spec.Tolerations) {
		t.Errorf("a second review added %v", again.Spec.Tolerations)
	}
	if other := review(t, w, "default", corev1.Pod{}); len(other.Spec.Tolerations) != 0 {
		t.Errorf("a pod of no team: %v", other.Spec.Tolerations)
	}
}

func TestParseQuota(t *testing.T) {
	hard, err := ParseQuota("pods=20000,services.nodeports=0,requests.nvidia.com/gpu=64")
	pods, nodePorts, gpus := hard["pods"], hard["services.nodeports"], hard["requests.nvidia.com/gpu"]
	if err != nil || len(hard) != 3 || pods.Value() != 20000 || !nodePorts.IsZero() || gpus.Value() != 64 {
		t.Errorf("ParseQuota: %v %v", hard, err)
	}
	for _, bad := range []string{"pods", "pods=many", "=1", "pods=1,secrets"} {
		if _, err := ParseQuota(bad); err == nil {
			t.Errorf("ParseQuota(%q) accepted", bad)
		}
	}
}
