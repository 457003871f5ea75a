package clusteraddons

import (
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/clusterforge/clusterforge/components/addons"
	"github.com/clusterforge/clusterforge/components/spec"
)

func TestTypeTokenIsPulumiKubernetes(t *testing.T) {
	for _, tc := range []struct {
		gvk  schema.GroupVersionKind
		want string
	}{
		{schema.GroupVersionKind{Version: "v1", Kind: "Service"}, "kubernetes:core/v1:Service"},
		{schema.GroupVersionKind{Group: "apps", Version: "v1", Kind: "Deployment"}, "kubernetes:apps/v1:Deployment"},
		{schema.GroupVersionKind{Group: "apiextensions.k8s.io", Version: "v1", Kind: "CustomResourceDefinition"}, "kubernetes:apiextensions.k8s.io/v1:CustomResourceDefinition"},
		{schema.GroupVersionKind{Group: "rbac.authorization.k8s.io", Version: "v1", Kind: "ClusterRole"}, "kubernetes:rbac.authorization.k8s.io/v1:ClusterRole"},
	} {
		if got := TypeToken(tc.gvk); got != tc.want {
			t.Errorf("TypeToken(%v) = %s, want %s", tc.gvk, got, tc.want)
		}
	}
}

func TestResourcesNameEachObjectAndOrderFirsts(t *testing.T) {
	objs := []addons.Object{
		&corev1.Namespace{TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "Namespace"}, ObjectMeta: metav1.ObjectMeta{Name: "monitoring"}},
		&apiextensionsv1.CustomResourceDefinition{TypeMeta: metav1.TypeMeta{APIVersion: "apiextensions.k8s.io/v1", Kind: "CustomResourceDefinition"},
			ObjectMeta: metav1.ObjectMeta{Name: "widgets.example.com"}},
		&rbacv1.ClusterRole{TypeMeta: metav1.TypeMeta{APIVersion: "rbac.authorization.k8s.io/v1", Kind: "ClusterRole"},
			ObjectMeta: metav1.ObjectMeta{Name: "system:coredns"}},
		&appsv1.Deployment{TypeMeta: metav1.TypeMeta{APIVersion: "apps/v1", Kind: "Deployment"},
			ObjectMeta: metav1.ObjectMeta{Namespace: "kube-system", Name: "coredns"}},
	}
	got, err := Resources("c-addons", objs)
	if err != nil {
		t.Fatal(err)
	}
	want := []struct {
		name  string
		first bool
	}{
		{"c-addons-namespace-monitoring", true},
		{"c-addons-customresourcedefinition-widgets.example.com", true},
		{"c-addons-clusterrole-system-coredns", false},
		{"c-addons-deployment-kube-system-coredns", false},
	}
	for i, w := range want {
		if got[i].Name != w.name || got[i].First != w.first {
			t.Errorf("resource %d: %s first=%v, want %s first=%v", i, got[i].Name, got[i].First, w.name, w.first)
		}
	}
	if got[3].Args["kind"] != "Deployment" || got[3].Args["metadata"].(map[string]any)["namespace"] != "kube-system" {
		t.Errorf("the Deployment's args lost its kind or namespace: %v", got[3].Args)
	}
}

// `pulumi up` waits for the add-ons that must run, not for balloons (pending by design once
// preempted), DaemonSets (ready only when every node is) or Services (their wait reads Endpoints),
// and puts back what a hand edit took.
func TestUpWaitsOnlyForWhatMustRun(t *testing.T) {
	c, err := spec.LoadStack("../../stacks/Pulumi.dev.yaml")
	if err != nil {
		t.Fatal(err)
	}
	objs, err := addons.Objects(c)
	if err != nil {
		t.Fatal(err)
	}
	rs, err := Resources("c-addons", objs)
	if err != nil {
		t.Fatal(err)
	}
	skipped := map[string]bool{}
	for i, r := range rs {
		annotations, _ := r.Args["metadata"].(map[string]any)["annotations"].(map[string]any)
		skipped[addons.Key(objs[i])] = annotations[SkipAwaitAnnotation] == "true"
		if annotations[PatchForceAnnotation] != "true" {
			t.Errorf("%s: a hand edit of it would block `pulumi up`", addons.Key(objs[i]))
		}
	}
	for key, want := range map[string]bool{
		"Deployment/kube-system/" + addons.DNSName:                 false,
		"Deployment/monitoring/" + addons.PrometheusName:           false,
		"Deployment/kube-system/" + addons.BalloonName(c.Pools[0]): true,
		"DaemonSet/monitoring/" + addons.NodeExporterName:          true,
		"DaemonSet/kube-system/" + addons.NodeProblemDetectorName:  true,
		"Service/kube-system/" + addons.DNSService:                 true,
	} {
		if got, ok := skipped[key]; !ok || got != want {
			t.Errorf("%s: skip await %v (registered %v), want %v", key, got, ok, want)
		}
	}
}
