package ops

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/informers"

	"github.com/clusterforge/clusterforge/components/addons"
	"github.com/clusterforge/clusterforge/components/ops/teams"
	"github.com/clusterforge/clusterforge/components/wellknown"
	"github.com/clusterforge/clusterforge/test/drills"
	"github.com/clusterforge/clusterforge/test/e2e/framework"
	"github.com/clusterforge/clusterforge/test/podsecurity"
)

// The seeds' team quotas (L17) on the rehearsal's scheduler: teams a and b own two nodes each of a
// four-node pool; b's low-priority pods borrow a's idle nodes, and a's pods, arriving later, take
// them back by preemption. The taint controller runs against the apiservers and the toleration
// webhook is a real mutating webhook.
func TeamBorrowsIdleNodesAndGivesThemBackByPreemption(t *testing.T) {
	framework.NeedRehearsal(t)
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	cs := framework.Clientset(t)
	const pool = "drill-teams"
	ops := drills.Namespace(t, cs, "drill-teams-ops")
	nsA, nsB := drills.TeamNamespace(t, cs, "drill-team-a", "a"), drills.TeamNamespace(t, cs, "drill-team-b", "b")
	objs, err := framework.Running.Addons()
	if err != nil {
		t.Fatal(err)
	}
	var classes []addons.Object
	for _, o := range objs {
		if o.GetObjectKind().GroupVersionKind().Kind == "PriorityClass" {
			classes = append(classes, o)
		}
	}
	if err := framework.Running.Apply(ctx, classes...); err != nil { // the borrow class, as the add-ons have it
		t.Fatal(err)
	}

	names := drillNodes(t, cs, pool, 4) // one 3-CPU pod fits on each
	allocations := fmt.Sprintf("- team: a\n  nodeSelector: {%s: %s}\n  nodes: 2\n- team: b\n  nodeSelector: {%s: %s}\n  nodes: 2\n", wellknown.PoolLabel, pool, wellknown.PoolLabel, pool)
	if _, err := cs.CoreV1().ConfigMaps(ops).Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: teams.ConfigMapName},
		Data: map[string]string{teams.ConfigMapKey: allocations}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}

	nodeFactory := informers.NewSharedInformerFactoryWithOptions(cs, 0, informers.WithTweakListOptions(func(o *metav1.ListOptions) { o.LabelSelector = wellknown.PoolLabel + "=" + pool }))
	configFactory := informers.NewSharedInformerFactoryWithOptions(cs, 0, informers.WithNamespace(ops))
	nodeInformer, configInformer := nodeFactory.Core().V1().Nodes().Informer(), configFactory.Core().V1().ConfigMaps().Informer()
	controller := &teams.Controller{Client: cs, Namespace: ops, Logf: t.Logf}
	nodeFactory.Start(ctx.Done())
	configFactory.Start(ctx.Done())
	done := make(chan error, 1)
	go func() { done <- controller.Run(ctx, nodeInformer, configInformer) }()
	defer func() {
		cancel()
		<-done
	}()
	var owned map[string][]string
	if err := drills.WaitUntil(time.Minute, func() error {
		if err := readyNodes(ctx, cs, names); err != nil {
			return err
		}
		owned = map[string][]string{}
		for _, name := range names {
			n, err := cs.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
			if err != nil {
				return err
			}
			owned[teams.TeamOf(n)] = append(owned[teams.TeamOf(n)], name)
		}
		if len(owned["a"]) != 2 || len(owned["b"]) != 2 {
			return fmt.Errorf("owners %v, want two nodes each for a and b", owned)
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	t.Logf("team a owns %v, team b owns %v", owned["a"], owned["b"])

	webhook := &teams.Webhook{BorrowPriorityClass: wellknown.BorrowPriority, NamespaceTeam: func(ns string) (string, error) {
		n, err := cs.CoreV1().Namespaces().Get(ctx, ns, metav1.GetOptions{})
		if err != nil {
			return "", err
		}
		return n.Labels[teams.NamespaceLabel], nil
	}}
	server := serveWebhook(t, webhook)
	fail, none := admissionregistrationv1.Fail, admissionregistrationv1.SideEffectClassNone
	config := &admissionregistrationv1.MutatingWebhookConfiguration{
		ObjectMeta: metav1.ObjectMeta{Name: "drill-team-tolerations"},
		Webhooks: []admissionregistrationv1.MutatingWebhook{{
			Name:         "team-tolerations.clusterforge.io",
			ClientConfig: server.Client,
			Rules: []admissionregistrationv1.RuleWithOperations{{Operations: []admissionregistrationv1.OperationType{admissionregistrationv1.Create},
				Rule: admissionregistrationv1.Rule{APIGroups: []string{""}, APIVersions: []string{"v1"}, Resources: []string{"pods"}}}},
			NamespaceSelector:       &metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{{Key: teams.NamespaceLabel, Operator: metav1.LabelSelectorOpExists}}},
			FailurePolicy:           &fail,
			SideEffects:             &none,
			AdmissionReviewVersions: []string{"v1"},
		}},
	}
	if _, err := cs.AdmissionregistrationV1().MutatingWebhookConfigurations().Create(ctx, config, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cs.AdmissionregistrationV1().MutatingWebhookConfigurations().Delete(context.Background(), config.Name, metav1.DeleteOptions{})
	})
	server.awaitRegistered(t, func(i int) {
		_, _ = cs.CoreV1().Pods(nsA).Create(ctx, teamPod(fmt.Sprintf("probe-%d", i), pool, ""), metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
	})

	// Team b fills the pool with borrowers: two on its own nodes, two on a's idle ones.
	for i := range 4 {
		if _, err := cs.CoreV1().Pods(nsB).Create(ctx, teamPod(fmt.Sprintf("borrower-%d", i), pool, wellknown.BorrowPriority), metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	placement := func(ns string) (map[string]string, error) {
		pods, err := cs.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{})
		if err != nil {
			return nil, err
		}
		out := map[string]string{}
		for _, p := range pods.Items {
			if p.Status.Phase == corev1.PodRunning && p.DeletionTimestamp == nil {
				out[p.Name] = p.Spec.NodeName
			}
		}
		return out, nil
	}
	onNodesOf := func(placed map[string]string, team string) int {
		n := 0
		for _, node := range placed {
			if slices.Contains(owned[team], node) {
				n++
			}
		}
		return n
	}
	if err := drills.WaitUntil(time.Minute, func() error {
		b, err := placement(nsB)
		if err != nil {
			return err
		}
		if onNodesOf(b, "b") != 2 || onNodesOf(b, "a") != 2 {
			return fmt.Errorf("b's pods run on %v", b)
		}
		return nil
	}); err != nil {
		t.Fatalf("team b did not borrow a's idle nodes: %v", err)
	}

	// Team a submits: its pods tolerate only a's nodes, so the scheduler preempts the borrowers there.
	for i := range 2 {
		if _, err := cs.CoreV1().Pods(nsA).Create(ctx, teamPod(fmt.Sprintf("owner-%d", i), pool, ""), metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	if err := drills.WaitUntil(2*time.Minute, func() error {
		a, err := placement(nsA)
		if err != nil {
			return err
		}
		b, err := placement(nsB)
		if err != nil {
			return err
		}
		if onNodesOf(a, "a") != 2 || onNodesOf(b, "a") != 0 || onNodesOf(b, "b") != 2 {
			return fmt.Errorf("a's pods run on %v, b's on %v", a, b)
		}
		return nil
	}); err != nil {
		t.Fatalf("team a did not get its nodes back: %v", err)
	}
}

// teamPod is a 3-CPU pause pod of the drill's pool, of the priority class if any.
func teamPod(name, pool, priorityClass string) *corev1.Pod {
	return podsecurity.Restricted(&corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: corev1.PodSpec{
			NodeSelector:                  map[string]string{wellknown.PoolLabel: pool},
			PriorityClassName:             priorityClass,
			TerminationGracePeriodSeconds: framework.Ptr(int64(0)),
			Containers: []corev1.Container{{Name: "app", Image: framework.Running.Cluster.Versions.PauseImage,
				Resources: corev1.ResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("3")}}}},
		},
	})
}
