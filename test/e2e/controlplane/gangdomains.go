package controlplane

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	schedulingv1beta1 "k8s.io/api/scheduling/v1beta1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"

	"github.com/clusterforge/clusterforge/components/addons"
	"github.com/clusterforge/clusterforge/components/machine"
	"github.com/clusterforge/clusterforge/components/nodestatus"
	"github.com/clusterforge/clusterforge/components/ops/gangs"
	"github.com/clusterforge/clusterforge/components/spec"
	"github.com/clusterforge/clusterforge/components/wellknown"
	"github.com/clusterforge/clusterforge/test/drills"
	"github.com/clusterforge/clusterforge/test/e2e/framework"
)

// The gang-domain drill's nodes: two domains of two, apart from every other pod by a taint.
const (
	gangDrill      = "gang-domains"
	gangDrillLabel = "clusterforge.io/drill"
)

var gangDrillDomains = map[string][]string{"ib-a": {"gang-domain-a-0", "gang-domain-a-1"}, "ib-b": {"gang-domain-b-0", "gang-domain-b-1"}}

// runGangRoom runs clusterforge-ops's gang-room controller until the test ends, as clusterforge-ops
// (so the admission policy holds it to lifting the gate), judging gangs against the gang domains
// the applied Deployment's --gang-domains names and the drill's two, alike the pool's nodes.
func runGangRoom(t *testing.T, objs []addons.Object, pool spec.Pool) {
	flag := ""
	for _, o := range objs {
		if d, ok := o.(*appsv1.Deployment); ok && d.Name == wellknown.OpsName {
			for _, a := range d.Spec.Template.Spec.Containers[0].Args {
				if v, ok := strings.CutPrefix(a, "--gang-domains="); ok {
					flag = v
				}
			}
		}
	}
	var shapes []spec.GangDomainShape
	if err := json.Unmarshal([]byte(flag), &shapes); err != nil {
		t.Fatalf("the ops Deployment's --gang-domains %q: %v", flag, err)
	}
	for _, s := range shapes {
		if s.Labels[wellknown.PoolLabel] != pool.Name {
			continue
		}
		drill := s
		drill.Labels = maps.Clone(s.Labels)
		drill.Labels[gangDrillLabel] = gangDrill
		drill.Taints = append(slices.Clone(s.Taints), spec.GangDomainTaint{Key: gangDrillLabel, Value: gangDrill, Effect: string(corev1.TaintEffectNoSchedule)})
		drill.Domains = nil
		for _, name := range slices.Sorted(maps.Keys(gangDrillDomains)) {
			drill.Domains = append(drill.Domains, spec.GangDomainSize{Name: name, MaxNodes: len(gangDrillDomains[name])})
		}
		shapes = append(shapes, drill)
		break
	}
	domains, err := gangs.Domains(shapes)
	if err != nil {
		t.Fatal(err)
	}
	ops := framework.As(t, framework.ServiceAccount(addons.SystemNamespace, wellknown.OpsName))
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		c := &gangs.Controller{Client: ops, Domains: domains, Logf: t.Logf}
		if err := c.Run(ctx); err != nil && ctx.Err() == nil {
			t.Errorf("the gang-room controller: %v", err)
		}
	}()
	t.Cleanup(func() { cancel(); <-done })
}

// checkGangDomains registers two gang domains of two GPU nodes each, as the CSR approver labels two
// InfiniBand placement groups, kept from every other pod by a taint, and submits two gangs whose
// PodGroups name no constraints: the apiserver gives them the gang domain (GangDomainPolicy) and
// their pods the gang-room gate (GangRoomPolicy). A gang of three whole-node pods, which only both
// domains together could hold, stays behind the gate, where neither the scheduler nor
// cluster-autoscaler sees it, and its PodGroup says why; a gang of two goes through and lands
// within one domain.
func checkGangDomains(t *testing.T, cs *kubernetes.Clientset, pool spec.Pool) {
	ctx := context.Background()
	taint := corev1.Taint{Key: gangDrillLabel, Value: gangDrill, Effect: corev1.TaintEffectNoSchedule}
	poolIndex := slices.IndexFunc(framework.Running.Cluster.Pools, func(p spec.Pool) bool { return p.Name == pool.Name })
	domainOf := map[string]string{}
	for domain, names := range gangDrillDomains {
		framework.DrillNodes(t, cs, poolIndex, names, func(n *corev1.Node) {
			framework.SetPlacement(n, pool.Name, domain)
			n.Labels[gangDrillLabel] = gangDrill
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
			pod.Spec.NodeSelector[gangDrillLabel] = gangDrill
			pod.Spec.Tolerations = append(pod.Spec.Tolerations, corev1.Toleration{Key: gangDrillLabel, Value: gangDrill, Effect: corev1.TaintEffectNoSchedule})
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
	var why string
	if err := drills.WaitUntil(time.Minute, func() error {
		events, err := cs.CoreV1().Events(ns).List(ctx, metav1.ListOptions{FieldSelector: "involvedObject.name=spans,reason=" + gangs.ReasonFitsNoDomain})
		if err != nil {
			return err
		}
		if len(events.Items) == 0 {
			return fmt.Errorf("no %s event on PodGroup spans", gangs.ReasonFitsNoDomain)
		}
		why = events.Items[0].Message
		return nil
	}); err != nil {
		t.Errorf("a gang that fits only across two domains was not said to wait: %v", err)
	} else {
		t.Logf("PodGroup spans waits at the gate: %s", why)
	}
	pods, err := cs.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range pods.Items {
		if !slices.ContainsFunc(p.Spec.SchedulingGates, func(g corev1.PodSchedulingGate) bool { return g.Name == wellknown.GangRoomGate }) {
			t.Errorf("pod %s of the gang no domain holds is not behind %s: %v", p.Name, wellknown.GangRoomGate, p.Spec.SchedulingGates)
		}
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
