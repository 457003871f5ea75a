package addons

import (
	_ "embed"
	"fmt"

	rbacv1 "k8s.io/api/rbac/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/yaml"

	"github.com/clusterforge/clusterforge/components/spec"
)

// The PodGroup CRD is scheduler-plugins' own, copied from the release the scheduler is built from.
//
//go:generate sh -c "cp \"$(cd ../../scripts/toolchain/scheduler-plugins && go list -m -f '{{.Dir}}' sigs.k8s.io/scheduler-plugins)/manifests/coscheduling/crd.yaml\" crds/podgroups.scheduling.x-k8s.io.yaml && chmod 644 crds/*.yaml"
//go:embed crds/podgroups.scheduling.x-k8s.io.yaml
var podGroupCRD []byte

// Coscheduling names (L16).
const (
	// PodGroupLabel puts a pod in a PodGroup: none of its pods binds until minMember can.
	PodGroupLabel = "scheduling.x-k8s.io/pod-group"
	// SchedulerUser is the scheduler's identity: the CN of its client certificate.
	SchedulerUser = "system:kube-scheduler"
	// coschedulingRole lets the scheduler read PodGroups and record their scheduling state.
	coschedulingRole = "clusterforge:scheduler:coscheduling"
)

// PodGroupCRD is the PodGroup CustomResourceDefinition.
func PodGroupCRD() (*apiextensionsv1.CustomResourceDefinition, error) {
	crd := &apiextensionsv1.CustomResourceDefinition{}
	if err := yaml.UnmarshalStrict(podGroupCRD, crd); err != nil {
		return nil, fmt.Errorf("the embedded PodGroup CRD: %w", err)
	}
	return crd, nil
}

// coscheduling is the PodGroup CRD and the scheduler's access to PodGroups; the scheduler profile
// that enables the plugin is machine.SchedulerConfig, since the apiserver machines run it.
func coscheduling(*spec.Cluster) []Object {
	crd, err := PodGroupCRD()
	if err != nil {
		panic(err) // embedded at build time; TestPodGroupCRDIsSchedulerPluginsOwn decodes it
	}
	return []Object{
		crd,
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
	}
}
