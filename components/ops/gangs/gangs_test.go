package gangs

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	schedulingv1beta1 "k8s.io/api/scheduling/v1beta1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/utils/ptr"

	"github.com/clusterforge/clusterforge/components/spec"
	"github.com/clusterforge/clusterforge/components/wellknown"
)

// Two InfiniBand placement groups of 4 nodes of 8 GPUs (zones 1 and 2), a third of 2, and a CPU pool
// of 10 nodes over two zones.
func testDomains(t *testing.T) []Domain {
	t.Helper()
	d, err := Domains([]spec.GangDomainShape{
		{Labels: map[string]string{wellknown.PoolLabel: "gpu", wellknown.GPULabel: "true", "kubernetes.io/os": "linux"},
			Taints:      []spec.GangDomainTaint{{Key: "nvidia.com/gpu", Value: "present", Effect: "NoSchedule"}},
			Allocatable: map[string]string{"cpu": "95000m", "memory": "850Gi", "pods": "10", "nvidia.com/gpu": "8"},
			Domains: []spec.GangDomainSize{{Name: "gpu-000", MaxNodes: 4, Zones: []string{"eastus2-1"}}, {Name: "gpu-001", MaxNodes: 4, Zones: []string{"eastus2-2"}},
				{Name: "gpu-002", MaxNodes: 2, Zones: []string{"eastus2-3"}}}},
		{Labels: map[string]string{wellknown.PoolLabel: "cpu", "kubernetes.io/os": "linux"},
			Allocatable: map[string]string{"cpu": "15000m", "memory": "60Gi", "pods": "30"},
			Domains:     []spec.GangDomainSize{{Name: "cpu", MaxNodes: 10, Zones: []string{"eastus2-1", "eastus2-2"}}}},
	})
	if err != nil {
		t.Fatal(err)
	}
	return d
}

func pod(name string, gpus int, cpu string, selector map[string]string) *corev1.Pod {
	p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "team-a"}}
	r := corev1.ResourceList{corev1.ResourceCPU: resource.MustParse(cpu)}
	if gpus > 0 {
		r["nvidia.com/gpu"] = *resource.NewQuantity(int64(gpus), resource.DecimalSI)
		p.Spec.Tolerations = []corev1.Toleration{{Key: "nvidia.com/gpu", Operator: corev1.TolerationOpExists}}
	}
	p.Spec.Containers = []corev1.Container{{Name: "c", Resources: corev1.ResourceRequirements{Requests: r, Limits: r}}}
	p.Spec.NodeSelector = selector
	return p
}

func copies(n int, p *corev1.Pod) []*corev1.Pod {
	out := make([]*corev1.Pod, n)
	for i := range out {
		out[i] = p
	}
	return out
}

func TestFit(t *testing.T) {
	domains := testDomains(t)
	onGPU := map[string]string{wellknown.GPULabel: "true"}
	for _, tc := range []struct {
		what string
		pods []*corev1.Pod
		size int
		fits string // "" when it waits
		why  string // in the reason when it waits
	}{
		{"a gang of four whole GPU nodes fits the first placement group", copies(4, pod("p", 8, "90", onGPU)), 4, "gpu-000", ""},
		{"five whole GPU nodes fit no placement group, though the pool has ten", copies(5, pod("p", 8, "90", onGPU)), 5, "", "the most any holds is 4, in gpu-000"},
		{"ten half-node pods fit in five nodes: no group", copies(10, pod("p", 4, "40", onGPU)), 10, "", "the most any holds is 8"},
		{"eight half-node pods pack two a node", copies(8, pod("p", 4, "40", onGPU)), 8, "gpu-000", ""},
		{"pods not made yet count as copies of the largest", copies(1, pod("p", 8, "90", onGPU)), 5, "", "gang of 5 pods"},
		{"every pod made counts, past minCount too: they share one domain", copies(9, pod("p", 8, "90", onGPU)), 3, "", "the most any holds is 4"},
		{"a GPU pod without the GPU toleration fits nowhere", copies(2, func() *corev1.Pod { p := pod("p", 8, "90", onGPU); p.Spec.Tolerations = nil; return p }()), 2, "", "the most any holds is 0"},
		{"a node selector picks the small group", copies(2, pod("p", 8, "90", map[string]string{wellknown.GangDomainLabel: "gpu-002"})), 2, "gpu-002", ""},
		{"CPU pods fit the CPU pool's domain", copies(20, pod("p", 0, "7", nil)), 20, "cpu", ""},
		{"CPU pods bigger than a node fit nowhere", copies(1, pod("p", 0, "16", nil)), 1, "", "the most any holds is 0"},
		{"a selector for another OS fits nowhere", copies(1, pod("p", 0, "1", map[string]string{"kubernetes.io/os": "windows"})), 1, "", "the most any holds is 0"},
		{"a zone selector picks that zone's group", copies(4, pod("p", 8, "90", map[string]string{wellknown.GPULabel: "true", wellknown.ZoneLabel: "eastus2-2"})), 4, "gpu-001", ""},
		{"a zone of a pool over two zones admits", copies(2, pod("p", 0, "7", map[string]string{wellknown.ZoneLabel: "eastus2-2"})), 2, "cpu", ""},
		{"the kubelet's labels, which the template does not model, are taken to hold", copies(2, pod("p", 0, "7", map[string]string{"node.kubernetes.io/instance-type": "Standard_D16s_v5"})), 2, "cpu", ""},
		{"a label no domain's nodes carry holds the gang", copies(2, pod("p", 0, "7", map[string]string{"example.com/rack": "r1"})), 2, "", "the most any holds is 0"},
		{"a resource no pool offers by name is not judged", copies(2, func() *corev1.Pod {
			p := pod("p", 0, "7", nil)
			p.Spec.Containers[0].Resources.Requests[corev1.ResourceEphemeralStorage] = resource.MustParse("100Gi")
			return p
		}()), 2, "cpu", ""},
		{"a huge minCount is judged by count, at once", copies(3, pod("p", 0, "1", nil)), 1 << 30, "", "gang of 1073741824 pods"},
		{"mixed pods pack together: 4 whole GPU nodes and 8 half ones need 8 nodes", append(copies(4, pod("w", 8, "90", onGPU)), copies(8, pod("h", 4, "40", onGPU))...), 12, "", "the most any holds is 4"},
		{"4 half GPU pods ride beside 2 whole ones in 4 nodes", append(copies(2, pod("w", 8, "90", onGPU)), copies(4, pod("h", 4, "40", onGPU))...), 6, "gpu-000", ""},
	} {
		v := Fit(domains, tc.pods, tc.size)
		if v.Fits != tc.fits || (tc.fits == "" && !strings.Contains(v.Why, tc.why)) {
			t.Errorf("%s: %+v, want fits %q, why containing %q", tc.what, v, tc.fits, tc.why)
		}
	}
}

// The controller lifts the gate and label of a gang that fits, leaves one that does not gated
// with an Event on its PodGroup, and lets through a gang that asked to span domains.
func TestControllerLiftsWhatFits(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	cs := fake.NewClientset()
	group := func(name string, minCount int32, withinDomains bool) {
		pg := &schedulingv1beta1.PodGroup{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "team-a"},
			Spec: schedulingv1beta1.PodGroupSpec{SchedulingPolicy: schedulingv1beta1.PodGroupSchedulingPolicy{Gang: &schedulingv1beta1.GangSchedulingPolicy{MinCount: minCount}},
				SchedulingConstraints: &schedulingv1beta1.PodGroupSchedulingConstraints{}}}
		if withinDomains {
			pg.Spec.SchedulingConstraints.Topology = []schedulingv1beta1.TopologyConstraint{{Key: wellknown.GangDomainLabel}}
		}
		if _, err := cs.SchedulingV1beta1().PodGroups("team-a").Create(ctx, pg, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		for i := range minCount {
			p := pod(name+"-"+string(rune('a'+i)), 8, "90", nil)
			p.Labels = map[string]string{wellknown.GangRoomLabel: wellknown.GangRoomWaiting}
			p.Spec.SchedulingGates = []corev1.PodSchedulingGate{{Name: wellknown.GangRoomGate}}
			p.Spec.SchedulingGroup = &corev1.PodSchedulingGroup{PodGroupName: ptr.To(name)}
			if _, err := cs.CoreV1().Pods("team-a").Create(ctx, p, metav1.CreateOptions{}); err != nil {
				t.Fatal(err)
			}
		}
	}
	group("fits", 4, true)
	group("too-big", 6, true)
	group("spans", 6, false)
	c := &Controller{Client: cs, Domains: testDomains(t)}
	go func() { _ = c.Run(ctx) }()

	gated := func(name string) bool {
		p, err := cs.CoreV1().Pods("team-a").Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		return len(p.Spec.SchedulingGates) > 0 || p.Labels[wellknown.GangRoomLabel] != ""
	}
	deadline := time.Now().Add(10 * time.Second)
	lifted := []string{"fits-a", "fits-d", "spans-a", "spans-f"}
	for time.Now().Before(deadline) && slices.ContainsFunc(lifted, gated) {
		time.Sleep(20 * time.Millisecond)
	}
	for _, name := range lifted {
		if gated(name) {
			t.Errorf("%s is still gated", name)
		}
	}
	var events *corev1.EventList
	for time.Now().Before(deadline) {
		var err error
		if events, err = cs.CoreV1().Events("team-a").List(ctx, metav1.ListOptions{}); err != nil {
			t.Fatal(err)
		}
		if len(events.Items) > 0 {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	if len(events.Items) != 1 || events.Items[0].InvolvedObject.Name != "too-big" || events.Items[0].Reason != ReasonFitsNoDomain {
		t.Fatalf("events %+v, want one %s on too-big", events.Items, ReasonFitsNoDomain)
	}
	t.Logf("too-big: %s", events.Items[0].Message)
	for _, name := range []string{"too-big-a", "too-big-f"} {
		if !gated(name) {
			t.Errorf("%s was let through", name)
		}
	}
}
