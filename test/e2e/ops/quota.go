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
	networkingv1 "k8s.io/api/networking/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/informers"

	"github.com/clusterforge/clusterforge/components/ops/teams"
	"github.com/clusterforge/clusterforge/components/spec"
	"github.com/clusterforge/clusterforge/components/wellknown"
	"github.com/clusterforge/clusterforge/test/drills"
	"github.com/clusterforge/clusterforge/test/e2e/framework"
)

// Every team namespace gets the stack's quota, as clusterforge-ops's rendered flag gives it, and the
// real apiservers hold the team to it: no NodePort Service; a quota deleted comes back, and so does
// the isolation policy. The quota
// counts every kind of object the real apiservers' edit role may create, so no kind is a way
// to fill etcd.
func TeamNamespacesGetTheQuota(t *testing.T) {
	framework.NeedRehearsal(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cs := framework.Clientset(t)
	objs, err := framework.Running.Addons()
	if err != nil {
		t.Fatal(err)
	}
	var flag string
	for _, o := range objs {
		if d, ok := o.(*appsv1.Deployment); ok && d.Name == wellknown.OpsName {
			for _, arg := range d.Spec.Template.Spec.Containers[0].Args {
				if v, ok := strings.CutPrefix(arg, "--team-quota="); ok {
					flag = v
				}
			}
		}
	}
	hard, err := teams.ParseQuota(flag)
	if err != nil || len(hard) == 0 {
		t.Fatalf("clusterforge-ops's --team-quota %q: %v", flag, err)
	}
	edit, err := cs.RbacV1().ClusterRoles().Get(ctx, "edit", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	// The role names groups no longer served (extensions): what is served counts.
	lists, err := cs.Discovery().ServerPreferredNamespacedResources()
	if err != nil {
		t.Fatal(err)
	}
	served := map[schema.GroupResource]bool{}
	for _, l := range lists {
		gv, err := schema.ParseGroupVersion(l.GroupVersion)
		if err != nil {
			t.Fatal(err)
		}
		for _, r := range l.APIResources {
			served[schema.GroupResource{Group: gv.Group, Resource: r.Name}] = true
		}
	}
	stored := map[string]bool{} // the kinds whose stored objects the quota bounds
	for name := range hard {
		if kind, ok := spec.StoredKind(string(name)); ok {
			stored[kind] = true
		}
	}
	for _, rule := range edit.Rules {
		if !slices.Contains(rule.Verbs, "create") && !slices.Contains(rule.Verbs, "*") {
			continue
		}
		for _, group := range rule.APIGroups {
			for _, r := range rule.Resources {
				if strings.Contains(r, "/") || !served[schema.GroupResource{Group: group, Resource: r}] {
					continue // a subresource (what it writes is its object's), or nothing served
				}
				count := "count/" + r
				if group != "" {
					count += "." + group
				}
				kind := strings.TrimPrefix(count, "count/")
				if !stored[kind] && !slices.Contains(spec.QuotaUncounted, count) {
					t.Errorf("edit may create %s, whose stored objects the team quota does not bound (%s)", kind, flag)
				}
			}
		}
	}
	ns := drills.TeamNamespace(t, cs, "drill-quota-a", "a")
	factory := informers.NewSharedInformerFactory(cs, 0)
	namespaces := factory.Core().V1().Namespaces().Informer()
	factory.Start(ctx.Done())
	done := make(chan error, 1)
	go func() {
		done <- (&teams.Namespaces{Client: cs, Hard: hard, Every: 2 * time.Second, Logf: t.Logf}).Run(ctx, namespaces)
	}()
	defer func() {
		cancel()
		<-done
	}()
	held := func() error {
		q, err := cs.CoreV1().ResourceQuotas(ns).Get(ctx, teams.QuotaName, metav1.GetOptions{})
		if err != nil {
			return err
		}
		if len(q.Status.Hard) != len(hard) {
			return fmt.Errorf("quota status holds %v, want %v", q.Status.Hard, hard)
		}
		return nil
	}
	if err := drills.WaitUntil(time.Minute, held); err != nil {
		t.Fatal(err)
	}
	nodePort := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: "node-port"}, Spec: corev1.ServiceSpec{Type: corev1.ServiceTypeNodePort,
		Ports: []corev1.ServicePort{{Port: 80}}}}
	if _, err := cs.CoreV1().Services(ns).Create(ctx, nodePort, metav1.CreateOptions{}); !apierrors.IsForbidden(err) || !strings.Contains(err.Error(), "exceeded quota: "+teams.QuotaName) {
		t.Errorf("a NodePort Service in a team namespace: %v, want Forbidden by the team quota", err)
	}
	if err := cs.CoreV1().ResourceQuotas(ns).Delete(ctx, teams.QuotaName, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := drills.WaitUntil(time.Minute, held); err != nil {
		t.Errorf("the deleted quota did not come back: %v", err)
	}
	// What the isolation enforces is the booted cluster's to show (a real azure-npm on each node).
	isolated := func() error {
		p, err := cs.NetworkingV1().NetworkPolicies(ns).Get(ctx, teams.IsolationName, metav1.GetOptions{})
		if err != nil {
			return err
		}
		if s := p.Spec; len(s.PodSelector.MatchLabels)+len(s.PodSelector.MatchExpressions) != 0 || !slices.Equal(s.PolicyTypes, []networkingv1.PolicyType{networkingv1.PolicyTypeIngress}) ||
			len(s.Ingress) != 1 || len(s.Ingress[0].Ports) != 0 || len(s.Ingress[0].From) != 1 || s.Ingress[0].From[0].PodSelector == nil ||
			s.Ingress[0].From[0].NamespaceSelector != nil || s.Ingress[0].From[0].IPBlock != nil || len(s.Ingress[0].From[0].PodSelector.MatchLabels) != 0 {
			return fmt.Errorf("%s selects %+v, want ingress to every pod from the namespace's own pods only", teams.IsolationName, s)
		}
		return nil
	}
	if err := drills.WaitUntil(time.Minute, isolated); err != nil {
		t.Fatal(err)
	}
	if err := cs.NetworkingV1().NetworkPolicies(ns).Delete(ctx, teams.IsolationName, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := drills.WaitUntil(time.Minute, isolated); err != nil {
		t.Errorf("the deleted isolation policy did not come back: %v", err)
	}
}
