package addons

import (
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"

	"github.com/clusterforge/clusterforge/components/spec"
	"github.com/clusterforge/clusterforge/components/wellknown"
)

// ServiceAccountUser is the user name a service account's tokens authenticate as (policies, tests).
func ServiceAccountUser(namespace, name string) string {
	return serviceAccountUserPrefix + namespace + ":" + name
}

// serviceAccountUserPrefix begins every service account's user name.
const serviceAccountUserPrefix = "system:serviceaccount:"

// serviceAccount is a workload's account: its cluster-wide rules in the ClusterRole
// "clusterforge:<name>" and its rules in its own namespace in the Role "<name>", each bound to it.
func serviceAccount(namespace, name string, clusterRules, namespaceRules []rbacv1.PolicyRule) []Object {
	objs := []Object{&corev1.ServiceAccount{ObjectMeta: meta(namespace, name, nil)}}
	subjects := []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Namespace: namespace, Name: name}}
	if len(clusterRules) > 0 {
		role := "clusterforge:" + name
		objs = append(objs,
			&rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: role}, Rules: clusterRules},
			&rbacv1.ClusterRoleBinding{ObjectMeta: metav1.ObjectMeta{Name: role}, Subjects: subjects,
				RoleRef: rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: role}})
	}
	if len(namespaceRules) > 0 {
		objs = append(objs,
			&rbacv1.Role{ObjectMeta: meta(namespace, name, nil), Rules: namespaceRules},
			&rbacv1.RoleBinding{ObjectMeta: meta(namespace, name, nil), Subjects: subjects,
				RoleRef: rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: name}})
	}
	return objs
}

// leaderElection lets a workload create leases and hold the one named lease.
func leaderElection(lease string) []rbacv1.PolicyRule {
	return []rbacv1.PolicyRule{
		{APIGroups: []string{"coordination.k8s.io"}, Resources: []string{"leases"}, Verbs: []string{"create"}},
		{APIGroups: []string{"coordination.k8s.io"}, Resources: []string{"leases"}, ResourceNames: []string{lease}, Verbs: []string{"get", "update"}},
	}
}

// systemDeployment is a one-replica Deployment on the system pool (cluster-level add-ons, one per
// cluster), running as the service account of its name.
func systemDeployment(c *spec.Cluster, namespace, name, priority string, pod corev1.PodSpec) *appsv1.Deployment {
	labels := map[string]string{"app": name}
	pool := c.SystemPool()
	pod.ServiceAccountName, pod.PriorityClassName = name, priority
	pod.NodeSelector = map[string]string{wellknown.PoolLabel: pool.Name}
	pod.Tolerations = poolTolerations(pool)
	return &appsv1.Deployment{
		ObjectMeta: meta(namespace, name, labels),
		Spec: appsv1.DeploymentSpec{
			Replicas: ptr(int32(1)),
			Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: labels}, Spec: pod},
		},
	}
}

// replaceFirst rolls out a Deployment whose replicas each hold a node of their own: a surge pod
// would find no free node in its pool (or make the autoscaler buy one), so old pods go first,
// at most maxUnavailable at a time (Kubernetes rounds a share of 0 up to one).
func replaceFirst(maxUnavailable intstr.IntOrString) appsv1.DeploymentStrategy {
	zero := intstr.FromInt32(0)
	return appsv1.DeploymentStrategy{Type: appsv1.RollingUpdateDeploymentStrategyType,
		RollingUpdate: &appsv1.RollingUpdateDeployment{MaxSurge: &zero, MaxUnavailable: &maxUnavailable}}
}
