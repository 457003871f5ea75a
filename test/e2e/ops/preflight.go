package ops

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/clusterforge/clusterforge/components/machine"
	"github.com/clusterforge/clusterforge/components/ops/preflight"
	"github.com/clusterforge/clusterforge/components/ops/remediation"
	"github.com/clusterforge/clusterforge/components/wellknown"
	"github.com/clusterforge/clusterforge/test/drills"
	"github.com/clusterforge/clusterforge/test/e2e/framework"
)

// The preflight taint's life cycle (L36) on the rehearsal's apiservers, with the CPU stand-in
// test: nodes register tainted; the agent clears the nodes that pass and marks the one that fails
// for remediation; the re-test taints the idle node again and restarts its agent pod (a real
// DaemonSet's), whose next pass clears it again; the busy node is left alone.
func PreflightTaintLifeCycle(t *testing.T) {
	framework.NeedRehearsal(t)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	cs := framework.Clientset(t)
	const pool = "drill-preflight"
	ns := drills.Namespace(t, cs, "drill-preflight")
	taint := corev1.Taint{Key: machine.PreflightTaint.Key, Value: machine.PreflightTaint.Value, Effect: corev1.TaintEffect(machine.PreflightTaint.Effect)}
	nodes := drillNodes(t, cs, pool, 3, taint)
	idle, broken, busy := nodes[0], nodes[1], nodes[2]

	// The agents' DaemonSet (pause pods standing in for the agent) tolerates every taint, as the real one must.
	agents := map[string]string{"app": "drill-preflight-agent"}
	ds := &appsv1.DaemonSet{ObjectMeta: metav1.ObjectMeta{Name: "preflight-agent"}, Spec: appsv1.DaemonSetSpec{
		Selector: &metav1.LabelSelector{MatchLabels: agents},
		Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: agents}, Spec: corev1.PodSpec{
			NodeSelector: map[string]string{wellknown.PoolLabel: pool}, Tolerations: []corev1.Toleration{{Operator: corev1.TolerationOpExists}},
			TerminationGracePeriodSeconds: framework.Ptr(int64(0)),
			Containers:                    []corev1.Container{{Name: "agent", Image: framework.Running.Cluster.Versions.PauseImage}}}}}}
	if _, err := cs.AppsV1().DaemonSets(ns).Create(ctx, ds, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}

	compute := preflight.Compute(1, 64<<20, 30*time.Second)
	pass := func(node string, tests ...preflight.Test) error {
		a := &preflight.Agent{Client: cs, NodeName: node, Tests: tests, PerTest: time.Minute}
		return a.Pass(ctx)
	}
	if err := drills.WaitUntil(time.Minute, func() error { return readyNodes(ctx, cs, nodes) }); err != nil {
		t.Fatal(err)
	}
	for _, n := range []string{idle, busy} {
		if err := pass(n, compute); err != nil {
			t.Fatalf("%s: %v", n, err)
		}
	}
	err := pass(broken, compute, preflight.Command("ecc", "/bin/sh", "-c", "echo 'uncorrectable ECC errors: 2' >&2; exit 1"))
	if err == nil || !strings.Contains(err.Error(), "preflight test ecc failed") {
		t.Fatalf("the broken node's pass: %v", err)
	}
	expect := func(name string, pending bool, failed corev1.ConditionStatus) *corev1.Node {
		t.Helper()
		n, err := cs.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		i := slices.IndexFunc(n.Status.Conditions, func(c corev1.NodeCondition) bool { return c.Type == preflight.FailedCondition })
		if preflight.Pending(n) != pending || i < 0 || n.Status.Conditions[i].Status != failed {
			t.Fatalf("%s: taints %v, conditions %v; want preflight pending %v and %s=%s", name, n.Spec.Taints, n.Status.Conditions, pending, preflight.FailedCondition, failed)
		}
		return n
	}
	expect(idle, false, corev1.ConditionFalse)
	expect(busy, false, corev1.ConditionFalse)
	b := expect(broken, true, corev1.ConditionTrue)
	// Remediation replaces it once the condition has stood its grace period.
	if step, reason, _ := remediation.DefaultPolicy().Next(b, time.Now().Add(remediation.DefaultPolicy().Grace+time.Second)); step != remediation.Mark || !strings.Contains(reason, "uncorrectable ECC") {
		t.Errorf("remediation's step for the failed node: %v (%s); want Mark with the test's message", step, reason)
	}

	// Work lands on the busy node; then the periodic re-test runs.
	work := teamPod("work", pool, "")
	work.Spec.NodeName = busy
	if _, err := cs.CoreV1().Pods(ns).Create(ctx, work, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	agentOn := func(node string) (*corev1.Pod, error) {
		pods, err := cs.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{LabelSelector: "app=drill-preflight-agent", FieldSelector: "spec.nodeName=" + node})
		if err != nil {
			return nil, err
		}
		for i := range pods.Items {
			if p := &pods.Items[i]; p.DeletionTimestamp == nil && p.Status.Phase == corev1.PodRunning {
				return p, nil
			}
		}
		return nil, fmt.Errorf("no running agent pod on %s", node)
	}
	var before *corev1.Pod
	if err := drills.WaitUntil(time.Minute, func() (err error) {
		if _, err = agentOn(busy); err != nil {
			return err
		}
		before, err = agentOn(idle)
		return err
	}); err != nil {
		t.Fatal(err)
	}
	retest := &preflight.Retest{Client: cs, Nodes: wellknown.PoolLabel + "=" + pool, Agents: "app=drill-preflight-agent", AgentNamespace: ns, MaxFraction: 1}
	var retested []string
	if err := drills.WaitUntil(30*time.Second, func() (err error) {
		// The work pod must be in the apiservers' watch cache before busy counts as busy.
		if retested, err = retest.Run(ctx); err != nil || slices.Equal(retested, []string{idle}) {
			return err
		}
		return fmt.Errorf("re-tested %v, want only %s", retested, idle)
	}); err != nil {
		t.Fatal(err)
	}
	expect(idle, true, corev1.ConditionFalse)
	expect(busy, false, corev1.ConditionFalse)
	if err := drills.WaitUntil(time.Minute, func() error {
		after, err := agentOn(idle)
		if err != nil {
			return err
		}
		if after.UID == before.UID {
			return fmt.Errorf("the agent pod on %s was not restarted", idle)
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if err := pass(idle, compute); err != nil {
		t.Fatal(err)
	}
	expect(idle, false, corev1.ConditionFalse)
}
