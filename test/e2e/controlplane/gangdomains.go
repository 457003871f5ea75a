package controlplane

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	schedulingv1beta1 "k8s.io/api/scheduling/v1beta1"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"

	"github.com/clusterforge/clusterforge/components/machine"
	"github.com/clusterforge/clusterforge/components/nodestatus"
	"github.com/clusterforge/clusterforge/components/spec"
	"github.com/clusterforge/clusterforge/components/wellknown"
	"github.com/clusterforge/clusterforge/test/drills"
	"github.com/clusterforge/clusterforge/test/e2e/framework"
)

// checkGangDomains registers two gang domains of two GPU nodes each, as the CSR approver labels two
// InfiniBand placement groups, kept from every other pod by a taint, and submits two gangs whose
// PodGroups name no constraints: the apiserver gives them the gang domain (GangDomainPolicy). A
// gang of three whole-node pods, which only both domains together could hold, waits whole and its
// PodGroup says why; a gang of two lands within one domain.
func checkGangDomains(t *testing.T, cs *kubernetes.Clientset, pool spec.Pool) {
	ctx := context.Background()
	const drill = "gang-domains"
	drillLabel := "clusterforge.io/drill"
	taint := corev1.Taint{Key: drillLabel, Value: drill, Effect: corev1.TaintEffectNoSchedule}
	poolIndex := slices.IndexFunc(framework.Running.Cluster.Pools, func(p spec.Pool) bool { return p.Name == pool.Name })
	domains := map[string][]string{"ib-a": {"gang-domain-a-0", "gang-domain-a-1"}, "ib-b": {"gang-domain-b-0", "gang-domain-b-1"}}
	domainOf := map[string]string{}
	for domain, names := range domains {
		framework.DrillNodes(t, cs, poolIndex, names, func(n *corev1.Node) {
			framework.SetPlacement(n, pool.Name, domain)
			n.Labels[drillLabel] = drill
			n.Spec.Taints = append(n.Spec.Taints, taint)
		})
		for _, n := range names {
			domainOf[n] = domain
		}
	}
	if err := drills.WaitUntil(time.Minute, func() error {
		for n := range domainOf {
			node, err := cs.CoreV1().Nodes().Get(ctx, n, metav1.GetOptions{})
			if err != nil || !nodestatus.IsReady(node) {
				return fmt.Errorf("node %s not ready: %v", n, err)
			}
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}

	capacity, _ := spec.VMCapacity(pool.VMSize)
	ns := drills.Namespace(t, cs, "drill-gang-domain")
	submit := func(group string, pods int) {
		t.Helper()
		pg, err := cs.SchedulingV1beta1().PodGroups(ns).Create(ctx, &schedulingv1beta1.PodGroup{ObjectMeta: metav1.ObjectMeta{Name: group},
			Spec: schedulingv1beta1.PodGroupSpec{SchedulingPolicy: schedulingv1beta1.PodGroupSchedulingPolicy{
				Gang: &schedulingv1beta1.GangSchedulingPolicy{MinCount: int32(pods)}}}}, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if sc := pg.Spec.SchedulingConstraints; sc == nil || len(sc.Topology) != 1 || sc.Topology[0].Key != wellknown.GangDomainLabel {
			t.Fatalf("PodGroup %s made without constraints has %+v, want a topology constraint on %s", group, sc, wellknown.GangDomainLabel)
		}
		for i := range pods {
			pod := gpuPod(fmt.Sprintf("%s-%d", group, i), pool, nil)
			pod.Spec.NodeSelector[drillLabel] = drill
			pod.Spec.Tolerations = append(pod.Spec.Tolerations, corev1.Toleration{Key: drillLabel, Value: drill, Effect: corev1.TaintEffectNoSchedule})
			whole := *resource.NewQuantity(int64(capacity.GPUs), resource.DecimalSI) // one pod a node
			pod.Spec.Containers[0].Resources.Requests[machine.GPUResource], pod.Spec.Containers[0].Resources.Limits[machine.GPUResource] = whole, whole
			pod.Spec.SchedulingGroup = &corev1.PodSchedulingGroup{PodGroupName: ptr.To(group)}
			if _, err := cs.CoreV1().Pods(ns).Create(ctx, pod, metav1.CreateOptions{}); err != nil {
				t.Fatal(err)
			}
		}
	}
	placed := func(group string) map[string]string {
		t.Helper()
		pods, err := cs.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{})
		if err != nil {
			t.Fatal(err)
		}
		nodes := map[string]string{}
		for _, p := range pods.Items {
			if p.Spec.NodeName != "" && *p.Spec.SchedulingGroup.PodGroupName == group {
				nodes[p.Name] = p.Spec.NodeName
			}
		}
		return nodes
	}

	// Four free nodes, two a domain: three pods fit the pool but no domain.
	submit("spans", 3)
	var why *metav1.Condition
	if err := drills.WaitUntil(time.Minute, func() error {
		pg, err := cs.SchedulingV1beta1().PodGroups(ns).Get(ctx, "spans", metav1.GetOptions{})
		if err != nil {
			return err
		}
		why = apimeta.FindStatusCondition(pg.Status.Conditions, schedulingv1beta1.PodGroupInitiallyScheduled)
		if why == nil || why.Status != metav1.ConditionFalse || why.Reason != schedulingv1beta1.PodGroupReasonUnschedulable {
			return fmt.Errorf("PodGroup spans: %s is %+v, pods bound %v", schedulingv1beta1.PodGroupInitiallyScheduled, why, placed("spans"))
		}
		return nil
	}); err != nil {
		t.Errorf("a gang that fits only across two domains was not marked unschedulable: %v", err)
	} else {
		t.Logf("PodGroup spans waits: %s: %s", why.Reason, why.Message)
	}
	if got := placed("spans"); len(got) != 0 {
		t.Errorf("a gang of three landed across gang domains: %v", got)
	}

	submit("fits", 2)
	var got map[string]string
	if err := drills.WaitUntil(time.Minute, func() error {
		if got = placed("fits"); len(got) != 2 {
			return fmt.Errorf("pods bound: %v", got)
		}
		return nil
	}); err != nil {
		t.Fatalf("a gang that fits one domain was not placed: %v", err)
	}
	seen := map[string]bool{}
	for _, node := range got {
		seen[domainOf[node]] = true
	}
	if len(seen) != 1 {
		t.Errorf("the gang of two spans gang domains: %v", got)
	}
	t.Logf("PodGroup fits bound within one gang domain: %v", got)
	if spans := placed("spans"); len(spans) != 0 {
		t.Errorf("the waiting gang took nodes: %v", spans)
	}
}
