package addons

import (
	"fmt"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/scheme"

	"github.com/clusterforge/clusterforge/components/spec"
)

// Object is one typed Kubernetes object of an add-on.
type Object interface {
	metav1.Object
	runtime.Object
}

// Namespaces of the add-ons.
const (
	SystemNamespace     = metav1.NamespaceSystem
	MonitoringNamespace = "monitoring"
)

// Labels every add-on object carries.
const (
	ManagedByLabel = "app.kubernetes.io/managed-by"
	PartOfLabel    = "app.kubernetes.io/part-of"
	ManagedBy      = "clusterforge"
)

// Objects are every add-on object of a validated cluster, in apply order: each namespace and CRD
// before the objects that use it. Each carries its apiVersion and kind.
func Objects(c *spec.Cluster) ([]Object, error) {
	var objs []Object
	for _, addon := range []struct {
		name    string
		objects func(*spec.Cluster) []Object
	}{
		{"bootstrap", bootstrap},
		{"tenancy", tenancy},
		{"fairness", teamFairness},
		{"priorities", priorityClasses},
		{"dns", dns},
		{"balloons", balloons},
		{autoscalerAddon, autoscaler},
		{"monitoring", monitoring},
		{"gpu", nvidiaDevicePlugin},
		{opsAddon, ops},
		{nodeHealthAddon, nodeHealth},
	} {
		for _, o := range addon.objects(c) {
			if err := finish(o, addon.name); err != nil {
				return nil, err
			}
			objs = append(objs, o)
		}
	}
	return objs, nil
}

// finish labels an object of an add-on, and its pods, with where they come from and sets its kind.
func finish(o Object, addon string) error {
	labels := o.GetLabels()
	if labels == nil {
		labels = map[string]string{}
	}
	labels[ManagedByLabel], labels[PartOfLabel] = ManagedBy, addon
	o.SetLabels(labels)
	if t := PodTemplate(o); t != nil {
		t.Labels[ManagedByLabel], t.Labels[PartOfLabel] = ManagedBy, addon
	}
	if err := setKind(o); err != nil {
		return fmt.Errorf("add-on %s: %w", addon, err)
	}
	return nil
}

// PodTemplate is a workload's pod template; nil for other objects.
func PodTemplate(o Object) *corev1.PodTemplateSpec {
	switch w := o.(type) {
	case *appsv1.Deployment:
		return &w.Spec.Template
	case *appsv1.DaemonSet:
		return &w.Spec.Template
	}
	return nil
}

// Scheme knows every kind the add-ons use.
var Scheme = func() *runtime.Scheme {
	s := runtime.NewScheme()
	if err := scheme.AddToScheme(s); err != nil {
		panic(err)
	}
	if err := admissionregistrationv1.AddToScheme(s); err != nil {
		panic(err)
	}
	if err := apiextensionsv1.AddToScheme(s); err != nil {
		panic(err)
	}
	return s
}()

func setKind(o Object) error {
	gvks, _, err := Scheme.ObjectKinds(o)
	if err != nil {
		return fmt.Errorf("%s: %w", o.GetName(), err)
	}
	o.GetObjectKind().SetGroupVersionKind(gvks[0])
	return nil
}

// Unstructured is the object as the API sees it: apiVersion, kind, metadata and the rest, with
// empty fields (creationTimestamp, status) left out so a server-side apply owns only what we set.
func Unstructured(o Object) (*unstructured.Unstructured, error) {
	m, err := runtime.DefaultUnstructuredConverter.ToUnstructured(o)
	if err != nil {
		return nil, err
	}
	u := &unstructured.Unstructured{Object: m}
	unstructured.RemoveNestedField(u.Object, "metadata", "creationTimestamp")
	unstructured.RemoveNestedField(u.Object, "status")
	return u, nil
}

// Key names an object for people and for Pulumi: "<kind>/<namespace>/<name>" or "<kind>/<name>".
func Key(o Object) string {
	kind := o.GetObjectKind().GroupVersionKind().Kind
	if o.GetNamespace() == "" {
		return kind + "/" + o.GetName()
	}
	return kind + "/" + o.GetNamespace() + "/" + o.GetName()
}

// meta is the metadata of a namespaced add-on object.
func meta(namespace, name string, labels map[string]string) metav1.ObjectMeta {
	return metav1.ObjectMeta{Namespace: namespace, Name: name, Labels: labels}
}
