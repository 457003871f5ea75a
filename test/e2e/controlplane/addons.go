package controlplane

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	authorizationv1 "k8s.io/api/authorization/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	schedulingv1beta1 "k8s.io/api/scheduling/v1beta1"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"

	"github.com/clusterforge/clusterforge/components/addons"
	"github.com/clusterforge/clusterforge/components/machine"
	"github.com/clusterforge/clusterforge/components/pki"
	"github.com/clusterforge/clusterforge/components/spec"
	"github.com/clusterforge/clusterforge/components/wellknown"
	"github.com/clusterforge/clusterforge/test/drills"
	"github.com/clusterforge/clusterforge/test/e2e/framework"
)

// Addons applies every add-on object with server-side apply, as the services program does, and
// checks what they promise against the real apiserver and scheduler.
func Addons(t *testing.T) {
	framework.NeedRehearsal(t)
	ctx := context.Background()
	cs := framework.Clientset(t)
	objs, err := framework.Running.Addons()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { removeAddons(t, cs, objs) })
	if err := framework.Running.Apply(ctx, objs...); err != nil {
		t.Fatal(err)
	}
	t.Logf("applied %d add-on objects with server-side apply", len(objs))
	gpuPool := poolWhere(func(p spec.Pool) bool { return p.IsGPU() })
	if gpuPool.Name == "" {
		t.Fatal("the stack has no GPU pool to run the balloon and gang checks on")
	}
	// Every gang's pod is made behind the gang-room gate: clusterforge-ops's controller lifts it,
	// here from the test process, as clusterforge-ops (its pods are KWOK pods in the rehearsal).
	runGangRoom(t, objs, gpuPool)

	t.Run("DNSReplicasOnDistinctNodes", func(t *testing.T) { checkDNSSpread(t, cs) })
	t.Run("NoDaemonSetListsOrWatchesClusterScope", func(t *testing.T) { checkNoPerNodePollers(t, cs, objs) })
	t.Run("TenancyAtAdmission", func(t *testing.T) { checkTenancy(t, cs) })
	t.Run("NodeAgentsChangeOnlyTheirFields", func(t *testing.T) { checkNodeAgentFields(t, cs) })
	t.Run("TeamRequestsQueueApart", func(t *testing.T) { checkTeamFairness(t, cs) })
	t.Run("NormalPodPreemptsBalloonOnFullPool", func(t *testing.T) { checkBalloonPreempted(t, cs, gpuPool) })
	t.Run("WholePoolGangsDoNotDeadlock", func(t *testing.T) { checkGangs(t, cs, gpuPool) })
	t.Run("GangsStayInOneGangDomain", func(t *testing.T) { checkGangDomains(t, cs, gpuPool) })
}

func checkDNSSpread(t *testing.T, cs *kubernetes.Clientset) {
	want := framework.Running.Cluster.DNS.Replicas
	var nodes []string
	err := drills.WaitUntil(time.Minute, func() error {
		pods, err := cs.CoreV1().Pods(addons.SystemNamespace).List(context.Background(), metav1.ListOptions{LabelSelector: addons.DNSAppLabel + "=" + addons.DNSService})
		if err != nil {
			return err
		}
		nodes = nil
		for _, p := range pods.Items {
			if p.Status.Phase == corev1.PodRunning {
				nodes = append(nodes, p.Spec.NodeName)
			}
		}
		if len(nodes) != want {
			return fmt.Errorf("%d of %d CoreDNS pods running", len(nodes), want)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	slices.Sort(nodes)
	if len(slices.Compact(slices.Clone(nodes))) != want {
		t.Fatalf("CoreDNS pods share nodes: %v (L13 wants one per node)", nodes)
	}
}

// checkNoPerNodePollers asks the apiserver's own authorizer whether any DaemonSet's service
// account may list or watch any cluster-scoped resource (L07, L08). A deliberately bad DaemonSet
// account proves the check can fail.
func checkNoPerNodePollers(t *testing.T, cs *kubernetes.Clientset, objs []addons.Object) {
	ctx := context.Background()
	scoped, err := clusterScopedResources(cs)
	if err != nil {
		t.Fatal(err)
	}
	// What Kubernetes grants every service account: only the public trust anchors pods may
	// project (ClusterTrustBundles, from 1.35), which no add-on's own grant may widen.
	ns := drills.Namespace(t, cs, "drill-poller")
	everyAccount := pollerGrants(t, cs, ns, "default", scoped)
	for _, g := range everyAccount {
		if !strings.HasSuffix(g, " clustertrustbundles.certificates.k8s.io") {
			t.Errorf("every service account may %s: a cluster-wide grant beyond Kubernetes' own", g)
		}
	}
	t.Logf("every service account may %v (Kubernetes' own grant)", everyAccount)
	var daemonSets int
	for _, o := range objs {
		ds, ok := o.(*appsv1.DaemonSet)
		if !ok {
			continue
		}
		daemonSets++
		found := slices.DeleteFunc(pollerGrants(t, cs, ds.Namespace, ds.Spec.Template.Spec.ServiceAccountName, scoped),
			func(g string) bool { return slices.Contains(everyAccount, g) })
		if len(found) > 0 {
			t.Errorf("DaemonSet %s/%s runs on every node and its service account may %s: move that to a cluster-level cache (L07)",
				ds.Namespace, ds.Name, strings.Join(found, ", "))
		}
	}
	if daemonSets == 0 {
		t.Fatal("no DaemonSet among the add-ons: the check would prove nothing")
	}

	bad := "bad-agent"
	if _, err := cs.CoreV1().ServiceAccounts(ns).Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: bad}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	binding := &rbacv1.ClusterRoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: "drill-poller"},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: "system:node-proxier"}, // kube-proxy's: watches nodes
		Subjects:   []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Namespace: ns, Name: bad}},
	}
	if _, err := cs.RbacV1().ClusterRoleBindings().Create(ctx, binding, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cs.RbacV1().ClusterRoleBindings().Delete(ctx, binding.Name, metav1.DeleteOptions{}) })
	// Each apiserver's RBAC authorizer learns of the new binding from its own watch: ask until both have.
	var found []string
	if err := drills.WaitUntil(15*time.Second, func() error {
		if found = pollerGrants(t, cs, ns, bad, scoped); !slices.Contains(found, "watch nodes") {
			return fmt.Errorf("found %v", found)
		}
		return nil
	}); err != nil {
		t.Fatalf("the check missed a service account bound to system:node-proxier: %v", err)
	}
}

// clusterScopedResources are the listable cluster-scoped resources the apiserver serves.
func clusterScopedResources(cs *kubernetes.Clientset) ([]schema.GroupResource, error) {
	lists, err := cs.Discovery().ServerPreferredResources()
	if err != nil {
		return nil, err
	}
	var out []schema.GroupResource
	for _, l := range lists {
		gv, err := schema.ParseGroupVersion(l.GroupVersion)
		if err != nil {
			return nil, err
		}
		for _, r := range l.APIResources {
			if !r.Namespaced && !strings.Contains(r.Name, "/") && slices.Contains(r.Verbs, "list") {
				out = append(out, schema.GroupResource{Group: gv.Group, Resource: r.Name})
			}
		}
	}
	return out, nil
}

// pollerGrants are the "verb resource" pairs of list and watch on cluster-scoped resources the
// service account is allowed, cluster-wide.
func pollerGrants(t *testing.T, cs *kubernetes.Clientset, namespace, account string, scoped []schema.GroupResource) []string {
	t.Helper()
	if account == "" {
		account = "default"
	}
	var found []string
	for _, gr := range scoped {
		for _, verb := range []string{"list", "watch"} {
			review, err := cs.AuthorizationV1().SubjectAccessReviews().Create(context.Background(), &authorizationv1.SubjectAccessReview{
				Spec: authorizationv1.SubjectAccessReviewSpec{
					User:               "system:serviceaccount:" + namespace + ":" + account,
					Groups:             []string{"system:serviceaccounts", "system:serviceaccounts:" + namespace, "system:authenticated"},
					ResourceAttributes: &authorizationv1.ResourceAttributes{Verb: verb, Group: gr.Group, Resource: gr.Resource},
				},
			}, metav1.CreateOptions{})
			if err != nil {
				t.Fatal(err)
			}
			if review.Status.Allowed {
				found = append(found, verb+" "+gr.String())
			}
		}
	}
	return found
}

// checkBalloonPreempted fills the pool with balloons, one per node, then asks for one GPU: the
// scheduler must evict a balloon for it at once (L15).
func checkBalloonPreempted(t *testing.T, cs *kubernetes.Clientset, pool spec.Pool) {
	ctx := context.Background()
	nodes := min(pool.MaxNodes, framework.NodesPerPool())
	full := balloonWithReplicas(t, pool, nodes)
	if err := framework.Running.Apply(ctx, full); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := framework.Running.Apply(ctx, balloonWithReplicas(t, pool, pool.Nodes)); err != nil {
			t.Error(err)
		}
		_ = drills.WaitUntil(time.Minute, func() error { return balloonsPlaced(cs, pool, 0) })
	})
	if err := drills.WaitUntil(time.Minute, func() error { return balloonsPlaced(cs, pool, nodes) }); err != nil {
		t.Fatalf("the pool never filled with balloons: %v", err)
	}

	ns := drills.Namespace(t, cs, "drill-preempt")
	pod := gpuPod("work", pool, nil)
	if _, err := cs.CoreV1().Pods(ns).Create(ctx, pod, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { // free its GPU for the gang check
		_ = cs.CoreV1().Pods(ns).Delete(ctx, pod.Name, metav1.DeleteOptions{GracePeriodSeconds: framework.Ptr(int64(0))})
		_ = drills.WaitUntil(time.Minute, func() error {
			if _, err := cs.CoreV1().Pods(ns).Get(ctx, pod.Name, metav1.GetOptions{}); err == nil {
				return fmt.Errorf("pod %s still there", pod.Name)
			}
			return nil
		})
	})
	err := drills.WaitUntil(30*time.Second, func() error {
		got, err := cs.CoreV1().Pods(ns).Get(ctx, pod.Name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		if got.Spec.NodeName == "" {
			return fmt.Errorf("the pod is not bound")
		}
		return nil
	})
	if err != nil {
		t.Fatalf("a normal pod did not preempt a balloon: %v", err)
	}
	if err := balloonsPlaced(cs, pool, nodes-1); err != nil {
		t.Fatalf("after preemption: %v", err)
	}
}

// checkGangs submits two gangs, PodGroups of Kubernetes' Workload API, that each need every node
// of the pool, their pods interleaved: one must bind whole while the other waits whole, never half
// each (L16). The scheduler marks the bound gang's PodGroup scheduled, and not the other's.
func checkGangs(t *testing.T, cs *kubernetes.Clientset, pool spec.Pool) {
	ctx := context.Background()
	nodes := min(pool.MaxNodes, framework.NodesPerPool())
	ns := drills.Namespace(t, cs, "drill-gang")
	groups := []string{"job-a", "job-b"}
	for _, g := range groups {
		pg := &schedulingv1beta1.PodGroup{ObjectMeta: metav1.ObjectMeta{Name: g}, Spec: schedulingv1beta1.PodGroupSpec{
			SchedulingPolicy: schedulingv1beta1.PodGroupSchedulingPolicy{Gang: &schedulingv1beta1.GangSchedulingPolicy{MinCount: int32(nodes)}}}}
		if _, err := cs.SchedulingV1beta1().PodGroups(ns).Create(ctx, pg, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	for i := range nodes {
		for _, g := range groups {
			pod := gpuPod(fmt.Sprintf("%s-%d", g, i), pool, nil)
			pod.Spec.SchedulingGroup = &corev1.PodSchedulingGroup{PodGroupName: ptr.To(g)}
			if _, err := cs.CoreV1().Pods(ns).Create(ctx, pod, metav1.CreateOptions{}); err != nil {
				t.Fatal(err)
			}
		}
	}
	bound := func() (map[string]int, error) {
		pods, err := cs.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{})
		if err != nil {
			return nil, err
		}
		n := map[string]int{}
		for _, p := range pods.Items {
			if p.Spec.NodeName != "" && p.Spec.SchedulingGroup != nil {
				n[*p.Spec.SchedulingGroup.PodGroupName]++
			}
		}
		return n, nil
	}
	var got map[string]int
	if err := drills.WaitUntil(time.Minute, func() (err error) {
		if got, err = bound(); err != nil {
			return err
		}
		if got[groups[0]] != nodes && got[groups[1]] != nodes {
			return fmt.Errorf("pods bound per group: %v", got)
		}
		return nil
	}); err != nil {
		t.Fatalf("no gang was placed whole: %v", err)
	}
	time.Sleep(5 * time.Second) // would the other gang now sneak a pod in?
	if got, _ = bound(); (got[groups[0]] != 0 && got[groups[0]] != nodes) || (got[groups[1]] != 0 && got[groups[1]] != nodes) {
		t.Fatalf("a gang is partly bound: %v; each must be bound whole or not at all", got)
	}
	t.Logf("pods bound per group: %v (the other waits whole)", got)

	whole, waiting := groups[0], groups[1]
	if got[whole] == 0 {
		whole, waiting = waiting, whole
	}
	scheduled := func(g string) (*metav1.Condition, error) {
		pg, err := cs.SchedulingV1beta1().PodGroups(ns).Get(ctx, g, metav1.GetOptions{})
		if err != nil {
			return nil, err
		}
		return apimeta.FindStatusCondition(pg.Status.Conditions, schedulingv1beta1.PodGroupInitiallyScheduled), nil
	}
	if err := drills.WaitUntil(time.Minute, func() error {
		c, err := scheduled(whole)
		if err == nil && (c == nil || c.Status != metav1.ConditionTrue) {
			err = fmt.Errorf("PodGroup %s: %s is %v", whole, schedulingv1beta1.PodGroupInitiallyScheduled, c)
		}
		return err
	}); err != nil {
		t.Errorf("the scheduler did not mark the bound gang scheduled: %v", err)
	}
	if c, err := scheduled(waiting); err != nil || (c != nil && c.Status == metav1.ConditionTrue) {
		t.Errorf("PodGroup %s, whose pods wait, is marked scheduled: %v %v", waiting, c, err)
	} else if c != nil {
		t.Logf("PodGroup %s waits: %s %s: %s", waiting, c.Status, c.Reason, c.Message)
	}
}

// balloonWithReplicas is the pool's balloon Deployment with another replica count.
func balloonWithReplicas(t *testing.T, pool spec.Pool, replicas int) addons.Object {
	t.Helper()
	objs, err := addons.Objects(framework.Running.Cluster)
	if err != nil {
		t.Fatal(err)
	}
	for _, o := range objs {
		if d, ok := o.(*appsv1.Deployment); ok && d.Name == addons.BalloonName(pool) {
			d.Spec.Replicas = framework.Ptr(int32(replicas))
			return d
		}
	}
	t.Fatalf("no balloon Deployment for pool %s", pool.Name)
	return nil
}

// balloonsPlaced: exactly want balloon pods of the pool are bound to nodes.
func balloonsPlaced(cs *kubernetes.Clientset, pool spec.Pool, want int) error {
	pods, err := cs.CoreV1().Pods(addons.SystemNamespace).List(context.Background(), metav1.ListOptions{LabelSelector: addons.BalloonAppLabel + "=" + pool.Name})
	if err != nil {
		return err
	}
	bound := 0
	for _, p := range pods.Items {
		if p.Spec.NodeName != "" && p.DeletionTimestamp == nil {
			bound++
		}
	}
	if bound != want {
		return fmt.Errorf("%d balloon pods bound in pool %s, want %d", bound, pool.Name, want)
	}
	return nil
}

// gpuPod asks for one GPU of the pool: a whole node of the rehearsal's one-GPU size.
func gpuPod(name string, pool spec.Pool, labels map[string]string) *corev1.Pod {
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Labels: labels},
		Spec: corev1.PodSpec{
			NodeSelector:                  map[string]string{wellknown.PoolLabel: pool.Name},
			Tolerations:                   []corev1.Toleration{{Key: machine.GPUResource, Operator: corev1.TolerationOpExists}},
			TerminationGracePeriodSeconds: framework.Ptr(int64(0)),
			Containers: []corev1.Container{{Name: "work", Image: framework.Running.Cluster.Versions.PauseImage,
				Resources: corev1.ResourceRequirements{
					Requests: corev1.ResourceList{machine.GPUResource: resource.MustParse("1"), corev1.ResourceCPU: resource.MustParse("1")},
					Limits:   corev1.ResourceList{machine.GPUResource: resource.MustParse("1")},
				}}},
		},
	}
}

func poolWhere(match func(spec.Pool) bool) spec.Pool {
	for _, p := range framework.Running.Cluster.Pools {
		if match(p) && min(p.MaxNodes, framework.NodesPerPool()) >= 2 {
			return p
		}
	}
	return spec.Pool{}
}

// removeAddons deletes the add-ons' workloads and waits until their pods are gone, so the checks
// after this one see empty pools.
func removeAddons(t *testing.T, cs *kubernetes.Clientset, objs []addons.Object) {
	ctx := context.Background()
	foreground := metav1.DeletePropagationForeground
	for _, o := range objs {
		switch w := o.(type) {
		case *appsv1.Deployment:
			_ = cs.AppsV1().Deployments(w.Namespace).Delete(ctx, w.Name, metav1.DeleteOptions{PropagationPolicy: &foreground})
		case *appsv1.DaemonSet:
			_ = cs.AppsV1().DaemonSets(w.Namespace).Delete(ctx, w.Name, metav1.DeleteOptions{PropagationPolicy: &foreground})
		}
	}
	err := drills.WaitUntil(2*time.Minute, func() error {
		for _, ns := range []string{addons.SystemNamespace, addons.MonitoringNamespace} {
			pods, err := cs.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{LabelSelector: addons.ManagedByLabel + "=" + addons.ManagedBy})
			if err != nil {
				return err
			}
			if len(pods.Items) > 0 {
				return fmt.Errorf("%d add-on pods left in %s", len(pods.Items), ns)
			}
		}
		return nil
	})
	if err != nil {
		t.Errorf("removing the add-ons: %v", err)
	}
}

// checkTeamFairness asks the real apiservers where they queue a team's request: a team's service
// account, in its namespace, in the teams' priority level; clusterforge-ops's and Prometheus's
// service accounts and the CSR approver, not.
// The apiservers name the level in each answer's headers (X-Kubernetes-PF-PriorityLevel-UID).
func checkTeamFairness(t *testing.T, cs *kubernetes.Clientset) {
	ctx := context.Background()
	level, err := cs.FlowcontrolV1().PriorityLevelConfigurations().Get(ctx, addons.TeamsPriorityLevel, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	ns := drills.TeamNamespace(t, cs, "drill-fairness-a", "a")
	serviceAccount := framework.ServiceAccount
	levelOf := func(namespace string, as rest.ImpersonationConfig) string {
		t.Helper()
		cfg, err := framework.Running.RESTConfig()
		if err != nil {
			t.Fatal(err)
		}
		cfg.Impersonate = as
		client, err := rest.HTTPClientFor(cfg)
		if err != nil {
			t.Fatal(err)
		}
		resp, err := client.Get(cfg.Host + "/api/v1/namespaces/" + namespace + "/configmaps")
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.Header.Get("X-Kubernetes-PF-PriorityLevel-UID")
	}
	// A level takes effect once each apiserver's APF controller has read it.
	if err := drills.WaitUntil(time.Minute, func() error {
		for range 4 {
			if got := levelOf(ns, serviceAccount(ns, "default")); got != string(level.UID) {
				return fmt.Errorf("a team's request queued at priority level %q, want %s's %s", got, addons.TeamsPriorityLevel, level.UID)
			}
		}
		return nil
	}); err != nil {
		t.Error(err)
	}
	for what, tc := range map[string]struct {
		namespace string
		as        rest.ImpersonationConfig
	}{
		"clusterforge-ops": {addons.SystemNamespace, serviceAccount(addons.SystemNamespace, wellknown.OpsName)},
		"Prometheus":       {addons.MonitoringNamespace, serviceAccount(addons.MonitoringNamespace, "prometheus")},
		"the CSR approver": {addons.SystemNamespace, rest.ImpersonationConfig{UserName: pki.CSRApproverUser, Groups: []string{"system:authenticated"}}},
	} {
		if got := levelOf(tc.namespace, tc.as); got == string(level.UID) || got == "" {
			t.Errorf("%s's request queued at priority level %q, want one of the platform's", what, got)
		}
	}
	// The join token's requests, whatever they name, queue at a level of their own.
	joins, err := cs.FlowcontrolV1().PriorityLevelConfigurations().Get(ctx, addons.JoinsPriorityLevel, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	joinToken := rest.ImpersonationConfig{UserName: "system:bootstrap:drill0", Groups: []string{pki.BootstrapGroup, "system:bootstrappers", "system:authenticated"}}
	if got := levelOf(ns, joinToken); got != string(joins.UID) {
		t.Errorf("the join token's request queued at priority level %q, want %s's %s", got, addons.JoinsPriorityLevel, joins.UID)
	}
}
