package addons

import (
	"embed"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/yaml"

	"github.com/clusterforge/clusterforge/components/spec"
)

// The CRDs are scheduler-plugins' own, copied from the release the scheduler is built from: the
// PodGroup, and the ElasticQuota its controller also reconciles.
//
//go:generate sh -c "cp \"$(cd ../../scripts/toolchain/scheduler-plugins && go list -m -f '{{.Dir}}' sigs.k8s.io/scheduler-plugins)/manifests/coscheduling/crd.yaml\" crds/podgroups.scheduling.x-k8s.io.yaml"
//go:generate sh -c "cp \"$(cd ../../scripts/toolchain/scheduler-plugins && go list -m -f '{{.Dir}}' sigs.k8s.io/scheduler-plugins)/manifests/capacityscheduling/crd.yaml\" crds/elasticquotas.scheduling.x-k8s.io.yaml && chmod 644 crds/*.yaml"
//go:embed crds/*.yaml
var crdFiles embed.FS

// CRDSources are the embedded CRD files and the scheduler-plugins files they copy.
var CRDSources = []struct{ File, Upstream string }{
	{"crds/podgroups.scheduling.x-k8s.io.yaml", "manifests/coscheduling/crd.yaml"},
	{"crds/elasticquotas.scheduling.x-k8s.io.yaml", "manifests/capacityscheduling/crd.yaml"},
}

// Coscheduling names (L16).
const (
	// PodGroupLabel puts a pod in a PodGroup: none of its pods binds until minMember can.
	PodGroupLabel = "scheduling.x-k8s.io/pod-group"
	// SchedulerUser is the scheduler's identity: the CN of its client certificate.
	SchedulerUser = "system:kube-scheduler"
	// PodGroupControllerName is scheduler-plugins' controller: it keeps each PodGroup's status
	// (phase, running, failed) and so wakes the scheduler when a gang's state changes.
	PodGroupControllerName = "scheduler-plugins-controller"
	// coschedulingRole lets the scheduler read PodGroups and record their scheduling state.
	coschedulingRole = "clusterforge:scheduler:coscheduling"
	// podGroupControllerLease is the controller's leader election lease in kube-system.
	podGroupControllerLease = "sched-plugins-controllers"
)

// CRDs are scheduler-plugins' CustomResourceDefinitions.
func CRDs() ([]*apiextensionsv1.CustomResourceDefinition, error) {
	var crds []*apiextensionsv1.CustomResourceDefinition
	for _, src := range CRDSources {
		data, err := crdFiles.ReadFile(src.File)
		if err != nil {
			return nil, err
		}
		crd := &apiextensionsv1.CustomResourceDefinition{}
		if err := yaml.UnmarshalStrict(data, crd); err != nil {
			return nil, fmt.Errorf("the embedded %s: %w", src.File, err)
		}
		crds = append(crds, crd)
	}
	return crds, nil
}

// coscheduling is the scheduler's part (schedulerSupport) and the PodGroup controller; the
// scheduler profile that enables the plugin is machine.SchedulerConfig, since the apiserver
// machines run it.
func coscheduling(c *spec.Cluster) []Object {
	return append(schedulerSupport(c), podGroupController(c)...)
}

// schedulerSupport is what the scheduler's Coscheduling plugin needs before the scheduler works
// at all (it waits for its PodGroup cache): the CRDs, and its access to PodGroups.
func schedulerSupport(*spec.Cluster) []Object {
	crds, err := CRDs()
	if err != nil {
		panic(err) // embedded at build time; TestCRDsAreSchedulerPluginsOwn decodes them
	}
	objs := []Object{}
	for _, crd := range crds {
		objs = append(objs, crd)
	}
	return append(objs,
		&rbacv1.ClusterRole{
			ObjectMeta: metav1.ObjectMeta{Name: coschedulingRole},
			Rules: []rbacv1.PolicyRule{
				{APIGroups: []string{"scheduling.x-k8s.io"}, Resources: []string{"podgroups", "podgroups/status"},
					Verbs: []string{"get", "list", "watch", "update", "patch"}},
			},
		},
		&rbacv1.ClusterRoleBinding{
			ObjectMeta: metav1.ObjectMeta{Name: coschedulingRole},
			RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: coschedulingRole},
			Subjects:   []rbacv1.Subject{{APIGroup: rbacv1.GroupName, Kind: rbacv1.UserKind, Name: SchedulerUser}},
		},
	)
}

// podGroupController is scheduler-plugins' controller with its own service account.
func podGroupController(c *spec.Cluster) []Object {
	crud := []string{"get", "list", "watch", "create", "update", "patch", "delete"}
	return append(serviceAccount(SystemNamespace, PodGroupControllerName, []rbacv1.PolicyRule{
		{APIGroups: []string{""}, Resources: []string{"pods"}, Verbs: []string{"get", "list", "watch"}},
		{APIGroups: []string{""}, Resources: []string{"events"}, Verbs: []string{"create", "patch", "update"}},
		{APIGroups: []string{"scheduling.x-k8s.io"}, Resources: []string{"podgroups", "elasticquotas"}, Verbs: crud},
		{APIGroups: []string{"scheduling.x-k8s.io"}, Resources: []string{"podgroups/status", "elasticquotas/status"}, Verbs: []string{"get", "update", "patch"}},
		{APIGroups: []string{"scheduling.x-k8s.io"}, Resources: []string{"podgroups/finalizers", "elasticquotas/finalizers"}, Verbs: []string{"update"}},
	}, leaderElection(podGroupControllerLease)),
		systemDeployment(c, SystemNamespace, PodGroupControllerName, SystemPriority, corev1.PodSpec{
			Containers: []corev1.Container{{
				Name:  PodGroupControllerName,
				Image: podGroupControllerImage(c).Ref,
				Args:  PodGroupControllerFlags(c),
				Resources: corev1.ResourceRequirements{
					Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("250m"), corev1.ResourceMemory: resource.MustParse("512Mi")},
					Limits:   corev1.ResourceList{corev1.ResourceMemory: resource.MustParse("1Gi")},
				},
			}},
		}),
	)
}

// PodGroupControllerFlags: it watches every pod, so its API budget grows with the fleet (L09).
func PodGroupControllerFlags(c *spec.Cluster) []string {
	qps := max(20, c.TargetNodes/200)
	return []string{"--enableLeaderElection", fmt.Sprintf("--qps=%d", qps), fmt.Sprintf("--burst=%d", 2*qps), "--workers=4"}
}
