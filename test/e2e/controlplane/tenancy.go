package controlplane

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	schedulingv1beta1 "k8s.io/api/scheduling/v1beta1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/kubernetes"

	"github.com/clusterforge/clusterforge/components/addons"
	"github.com/clusterforge/clusterforge/components/machine"
	"github.com/clusterforge/clusterforge/components/wellknown"
	"github.com/clusterforge/clusterforge/test/drills"
	"github.com/clusterforge/clusterforge/test/e2e/framework"
	"github.com/clusterforge/clusterforge/test/podsecurity"
)

// checkTenancy asks the real apiservers, with the add-ons applied, what each namespace admits:
// a plain namespace refuses host access (baseline), a team namespace refuses a root container
// (restricted), monitoring admits node-exporter's host access; a namespace cannot be labelled
// with a team without the restricted level, and a team's pod tolerates only its own team's taint
// (every team's when borrowing), the GPU taint when it asks for GPUs and not-ready nodes for a
// while, chooses no node, runs at a tenant's priority and probes no host (the add-ons' admission
// policies). Pods are dry runs.
func checkTenancy(t *testing.T, cs *kubernetes.Clientset) {
	ctx := context.Background()
	plain := drills.Namespace(t, cs, "drill-psa-plain")
	team := drills.TeamNamespace(t, cs, "drill-psa-team", "drill")
	pod := func(name string, edit func(*corev1.PodSpec)) *corev1.Pod {
		p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: corev1.PodSpec{
			Containers: []corev1.Container{{Name: "app", Image: framework.Running.Cluster.Versions.PauseImage}}}}
		edit(&p.Spec)
		return p
	}
	hostPath := func(s *corev1.PodSpec) {
		s.Volumes = []corev1.Volume{{Name: "root", VolumeSource: corev1.VolumeSource{HostPath: &corev1.HostPathVolumeSource{Path: "/"}}}}
	}
	hostNetwork := func(s *corev1.PodSpec) { s.HostNetwork = true }
	restricted := func(name string, edit func(*corev1.PodSpec)) *corev1.Pod {
		return podsecurity.Restricted(pod(name, edit))
	}
	tolerate := func(tolerations ...corev1.Toleration) func(*corev1.PodSpec) {
		return func(s *corev1.PodSpec) { s.Tolerations = tolerations }
	}
	teamTaint := func(op corev1.TolerationOperator, team string) corev1.Toleration {
		return corev1.Toleration{Key: wellknown.TeamKey, Operator: op, Value: team, Effect: corev1.TaintEffectNoSchedule}
	}
	borrowing := func(s *corev1.PodSpec) {
		s.PriorityClassName = wellknown.BorrowPriority
		s.Tolerations = []corev1.Toleration{teamTaint(corev1.TolerationOpExists, "")}
	}
	placement := drills.RefusedBy(addons.TeamPlacementPolicy)
	// An admission policy takes effect once each apiserver has loaded it: wait until both refuse
	// several requests in a row, which the load balancer spreads over the apiservers.
	unrestricted := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "drill-psa-unrestricted-team", Labels: map[string]string{wellknown.TeamKey: "drill"}}}
	named := podsecurity.Restricted(pod("named", func(s *corev1.PodSpec) { s.NodeName = "any-node" }))
	if err := drills.WaitUntil(time.Minute, func() error {
		for range 6 {
			_, err := cs.CoreV1().Namespaces().Create(ctx, unrestricted, metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
			if !apierrors.IsForbidden(err) || !strings.Contains(err.Error(), addons.TeamNamespacePolicy) {
				return fmt.Errorf("a team namespace without the restricted level: %v, want a refusal by %s", err, addons.TeamNamespacePolicy)
			}
			_, err = cs.CoreV1().Pods(team).Create(ctx, named, metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
			if !apierrors.IsForbidden(err) || !strings.Contains(err.Error(), addons.TeamPlacementPolicy) {
				return fmt.Errorf("a team's pod naming its node: %v, want a refusal by %s", err, addons.TeamPlacementPolicy)
			}
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		what, namespace string
		pod             *corev1.Pod
		refusal         string // "" when admitted; alternatives separated by "|"
	}{
		{"a plain pod in a plain namespace", plain, pod("plain", func(*corev1.PodSpec) {}), ""},
		{"hostPath / in a plain namespace", plain, pod("host-path", hostPath), `violates PodSecurity "baseline`},
		{"hostNetwork in a plain namespace", plain, pod("host-network", hostNetwork), `violates PodSecurity "baseline`},
		{"a root container in a team namespace", team, pod("root", func(*corev1.PodSpec) {}), `violates PodSecurity "restricted`},
		{"a restricted pod in a team namespace", team, podsecurity.Restricted(pod("restricted", func(*corev1.PodSpec) {})), ""},
		{"hostNetwork in monitoring", addons.MonitoringNamespace, pod("host-network", hostNetwork), ""},
		{"its own team's toleration", team, restricted("own", tolerate(teamTaint(corev1.TolerationOpEqual, "drill"))), ""},
		{"borrowing at the borrow priority", team, restricted("borrow", borrowing), ""},
		{"another team's toleration", team, restricted("other", tolerate(teamTaint(corev1.TolerationOpEqual, "other"))), placement},
		{"every team's toleration without borrowing", team, restricted("all-teams", tolerate(teamTaint(corev1.TolerationOpExists, ""))), placement},
		{"a toleration of every taint", team, restricted("everything", tolerate(corev1.Toleration{Operator: corev1.TolerationOpExists})), placement},
		{"the preflight taint's toleration", team, restricted("preflight", tolerate(corev1.Toleration{Key: wellknown.PreflightTaint, Operator: corev1.TolerationOpExists})), placement},
		{"the GPU taint's toleration, asking for a GPU", team, restricted("gpu", func(s *corev1.PodSpec) {
			s.Tolerations = []corev1.Toleration{{Key: machine.GPUResource, Operator: corev1.TolerationOpExists}}
			s.Containers[0].Resources.Limits = corev1.ResourceList{machine.GPUResource: resource.MustParse("1")}
		}), ""},
		{"the GPU taint's toleration, asking for none", team, restricted("gpu-idle", tolerate(corev1.Toleration{Key: machine.GPUResource, Operator: corev1.TolerationOpExists})), placement},
		{"not-ready tolerated for ever", team, restricted("not-ready", tolerate(corev1.Toleration{Key: corev1.TaintNodeNotReady, Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoExecute})), placement},
		{"a host name selected", team, restricted("hostname", func(s *corev1.PodSpec) { s.NodeSelector = map[string]string{corev1.LabelHostname: "any-node"} }), placement},
		{"a critical priority", team, restricted("critical", func(s *corev1.PodSpec) { s.PriorityClassName = addons.NodeCriticalPriority }), placement},
		{"anti-affinity to its own pods by gang domain", team, restricted("own-spread", antiAffinity(nil)), ""},
		{"anti-affinity to every namespace's pods", team, restricted("repel-all", antiAffinity(&metav1.LabelSelector{})), placement},
		// Pod Security refuses it too from v1.34, before the policy is asked.
		{"a probe of the metadata service", team, restricted("probe-host", func(s *corev1.PodSpec) {
			s.Containers[0].LivenessProbe = &corev1.Probe{ProbeHandler: corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{
				Host: wellknown.IMDSAddress, Path: "/metadata/instance", Port: intstr.FromInt32(80)}}}
		}), placement + "|" + `violates PodSecurity "restricted`},
	} {
		_, err := cs.CoreV1().Pods(tc.namespace).Create(ctx, tc.pod, metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
		switch {
		case tc.refusal == "" && err != nil:
			t.Errorf("%s: refused: %v", tc.what, err)
		case tc.refusal != "" && (err == nil || !slices.ContainsFunc(strings.Split(tc.refusal, "|"), func(r string) bool { return strings.Contains(err.Error(), r) })):
			t.Errorf("%s: %v, want a refusal containing %q", tc.what, err, tc.refusal)
		}
	}

	// A gang runs at its PodGroup's priority: a team's is held to its pods' classes (L16).
	if !machine.GangScheduling(framework.Running.Cluster) {
		return
	}
	gangs := drills.RefusedBy(addons.TeamGangPolicy)
	for _, tc := range []struct {
		what, class, refusal string
	}{
		{"a team's gang at the default class", "", ""},
		{"a team's gang at the borrow class", wellknown.BorrowPriority, ""},
		{"a team's gang at the platform's class", addons.SystemPriority, gangs},
	} {
		pg := &schedulingv1beta1.PodGroup{ObjectMeta: metav1.ObjectMeta{Name: "gang"}, Spec: schedulingv1beta1.PodGroupSpec{PriorityClassName: tc.class,
			SchedulingPolicy: schedulingv1beta1.PodGroupSchedulingPolicy{Gang: &schedulingv1beta1.GangSchedulingPolicy{MinCount: 2}}}}
		var err error
		if waitErr := drills.WaitUntil(time.Minute, func() error { // until both apiservers have loaded the policy
			_, err = cs.SchedulingV1beta1().PodGroups(team).Create(ctx, pg, metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
			if (err == nil) != (tc.refusal == "") {
				return fmt.Errorf("%v", err)
			}
			return nil
		}); waitErr != nil || tc.refusal != "" && !strings.Contains(err.Error(), tc.refusal) {
			t.Errorf("%s: %v, want a refusal containing %q: %v", tc.what, err, tc.refusal, waitErr)
		}
	}
}

// antiAffinity keeps the pod off gang domains holding pods of the namespaces selected (nil: its own).
func antiAffinity(namespaces *metav1.LabelSelector) func(*corev1.PodSpec) {
	return func(s *corev1.PodSpec) {
		s.Affinity = &corev1.Affinity{PodAntiAffinity: &corev1.PodAntiAffinity{RequiredDuringSchedulingIgnoredDuringExecution: []corev1.PodAffinityTerm{{
			LabelSelector: &metav1.LabelSelector{}, NamespaceSelector: namespaces, TopologyKey: wellknown.GangDomainLabel}}}}
	}
}
