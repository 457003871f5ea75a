package controlplane

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/kubernetes"

	"github.com/clusterforge/clusterforge/components/addons"
	"github.com/clusterforge/clusterforge/components/apiload"
	"github.com/clusterforge/clusterforge/components/machine"
	"github.com/clusterforge/clusterforge/components/pki"
	"github.com/clusterforge/clusterforge/components/spec"
	"github.com/clusterforge/clusterforge/test/drills"
	"github.com/clusterforge/clusterforge/test/e2e/framework"
)

// No per-node agent of the booted cluster lists or watches a namespaced resource across every
// namespace beyond what it needs, and nothing outside the control plane reads Endpoints, by the
// apiservers' own audit logs (L07, L08). A DaemonSet of Prometheus agents discovering every
// namespace's Endpoints, the kind of agent the seeds found listing Events from every node, is
// found by the same check.
func NoPerNodeAgentReadsTheWholeCluster(t *testing.T) {
	framework.NeedBoot(t)
	cs := drills.Clientset(t, framework.Booted)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	namespaced := namespacedResources(t, cs)
	// The workers' own agents are judged once each kind has read on some worker: azure-npm
	// starts reading minutes after its node boots (machine.networkPolicy).
	if err := drills.WaitUntil(5*time.Minute, func() error {
		events := auditEvents(t)
		for _, a := range apiload.NodeAgents(pki.NodeUserPrefix) {
			if !a.Reads(events) {
				return fmt.Errorf("no list or watch of %s in the audit logs yet", a.Name)
			}
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if findings := apiload.Check(auditEvents(t), perNodeAgents(t, ctx, cs), namespaced); len(findings) > 0 {
		t.Errorf("the audit logs show clients reading what loads a large cluster for nothing:\n%s", joinFindings(findings))
	}

	ns := drills.Namespace(t, cs, "drill-bad-agent")
	startEndpointsScrapers(t, ctx, cs, ns)
	const bad = "drill-bad-agent/endpoints-scraper"
	var findings []apiload.Finding
	deadline := time.Now().Add(3 * time.Minute)
	for ; time.Now().Before(deadline); time.Sleep(5 * time.Second) {
		findings = apiload.Check(auditEvents(t), perNodeAgents(t, ctx, cs), namespaced)
		// Prometheus' endpoints discovery also watches every namespace's Services and Pods.
		if slices.ContainsFunc(findings, func(f apiload.Finding) bool { return f.Client == bad && f.Resource == "endpoints" && f.Verb == "watch" }) &&
			slices.ContainsFunc(findings, func(f apiload.Finding) bool { return f.Client == bad && f.Resource == "services" && f.Verb == "watch" }) {
			t.Logf("found:\n%s", joinFindings(findings))
			return
		}
	}
	t.Errorf("a DaemonSet watching every namespace's Endpoints and Services from every node is not found for both; found:\n%s", joinFindings(findings))
}

func joinFindings(findings []apiload.Finding) string {
	var b bytes.Buffer
	for _, f := range findings {
		fmt.Fprintf(&b, "  %s\n", f)
	}
	return b.String()
}

// auditEvents reads every apiserver's audit log.
func auditEvents(t *testing.T) []apiload.Event {
	t.Helper()
	var all []apiload.Event
	for _, m := range framework.Booted.Machines {
		if m.Role != spec.RoleAPIServer {
			continue
		}
		data, err := os.ReadFile(filepath.Join(m.Root, machine.AuditLogPath))
		if err != nil {
			t.Fatal(err)
		}
		data = data[:bytes.LastIndexByte(data, '\n')+1] // the apiserver may be writing the last line
		events, err := apiload.ReadEvents(bytes.NewReader(data))
		if err != nil {
			t.Fatalf("%s: %v", m.Name, err)
		}
		all = append(all, events...)
	}
	return all
}

// perNodeAgents are the kubelets, kube-proxies and every DaemonSet's service account.
func perNodeAgents(t *testing.T, ctx context.Context, cs *kubernetes.Clientset) []apiload.Agent {
	t.Helper()
	sets, err := cs.AppsV1().DaemonSets("").List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	agents := apiload.NodeAgents(pki.NodeUserPrefix)
	for _, ds := range sets.Items {
		agents = append(agents, apiload.DaemonSetAgent(ds.Name, ds.Namespace, ds.Spec.Template.Spec.ServiceAccountName))
	}
	return agents
}

// namespacedResources says, by the apiservers' discovery, whether a resource is namespaced.
func namespacedResources(t *testing.T, cs *kubernetes.Clientset) func(group, resource string) bool {
	t.Helper()
	lists, err := cs.Discovery().ServerPreferredResources()
	if err != nil {
		t.Fatal(err)
	}
	namespaced := map[schema.GroupResource]bool{}
	for _, list := range lists {
		gv, err := schema.ParseGroupVersion(list.GroupVersion)
		if err != nil {
			t.Fatal(err)
		}
		for _, r := range list.APIResources {
			namespaced[schema.GroupResource{Group: gv.Group, Resource: r.Name}] = r.Namespaced
		}
	}
	return func(group, resource string) bool {
		return namespaced[schema.GroupResource{Group: group, Resource: resource}]
	}
}

// startEndpointsScrapers runs, on every worker, a Prometheus (the add-on's own image) that
// discovers the Endpoints of every namespace.
func startEndpointsScrapers(t *testing.T, ctx context.Context, cs *kubernetes.Clientset, ns string) {
	t.Helper()
	prometheus, err := cs.AppsV1().Deployments(addons.MonitoringNamespace).Get(ctx, addons.PrometheusName, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	const name = "endpoints-scraper"
	role := &rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: ns},
		Rules: []rbacv1.PolicyRule{{APIGroups: []string{""}, Resources: []string{"endpoints", "services", "pods"}, Verbs: []string{"get", "list", "watch"}}}}
	binding := &rbacv1.ClusterRoleBinding{ObjectMeta: metav1.ObjectMeta{Name: ns},
		RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: ns},
		Subjects: []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Namespace: ns, Name: name}}}
	config := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: name}, Data: map[string]string{"prometheus.yml": `scrape_configs:
- job_name: every-endpoint
  kubernetes_sd_configs:
  - role: endpoints
`}}
	labels := map[string]string{"app": name}
	ds := &appsv1.DaemonSet{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: appsv1.DaemonSetSpec{
		Selector: &metav1.LabelSelector{MatchLabels: labels},
		Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: labels}, Spec: corev1.PodSpec{
			ServiceAccountName: name,
			SecurityContext:    &corev1.PodSecurityContext{RunAsNonRoot: framework.Ptr(true), RunAsUser: framework.Ptr(int64(65534)), SeccompProfile: &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault}},
			Containers: []corev1.Container{{Name: "prometheus", Image: prometheus.Spec.Template.Spec.Containers[0].Image,
				Args:            []string{"--config.file=/etc/scraper/prometheus.yml", "--storage.tsdb.path=/prometheus"},
				SecurityContext: &corev1.SecurityContext{AllowPrivilegeEscalation: framework.Ptr(false), Capabilities: &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}}},
				Resources:       corev1.ResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("10m"), corev1.ResourceMemory: resource.MustParse("64Mi")}},
				VolumeMounts:    []corev1.VolumeMount{{Name: "config", MountPath: "/etc/scraper"}, {Name: "data", MountPath: "/prometheus"}}}},
			Volumes: []corev1.Volume{
				{Name: "config", VolumeSource: corev1.VolumeSource{ConfigMap: &corev1.ConfigMapVolumeSource{LocalObjectReference: corev1.LocalObjectReference{Name: name}}}},
				{Name: "data", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}},
			},
		}},
	}}
	t.Cleanup(func() {
		_ = cs.RbacV1().ClusterRoleBindings().Delete(context.Background(), ns, metav1.DeleteOptions{})
		_ = cs.RbacV1().ClusterRoles().Delete(context.Background(), ns, metav1.DeleteOptions{})
	})
	for _, create := range []func() error{
		func() error {
			_, err := cs.RbacV1().ClusterRoles().Create(ctx, role, metav1.CreateOptions{})
			return err
		},
		func() error {
			_, err := cs.RbacV1().ClusterRoleBindings().Create(ctx, binding, metav1.CreateOptions{})
			return err
		},
		func() error {
			_, err := cs.CoreV1().ServiceAccounts(ns).Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: name}}, metav1.CreateOptions{})
			return err
		},
		func() error {
			_, err := cs.CoreV1().ConfigMaps(ns).Create(ctx, config, metav1.CreateOptions{})
			return err
		},
		func() error { _, err := cs.AppsV1().DaemonSets(ns).Create(ctx, ds, metav1.CreateOptions{}); return err },
	} {
		if err := create(); err != nil {
			t.Fatal(err)
		}
	}
}
