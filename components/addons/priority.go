package addons

import (
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	schedulingv1 "k8s.io/api/scheduling/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/clusterforge/clusterforge/components/machine"
	"github.com/clusterforge/clusterforge/components/spec"
	"github.com/clusterforge/clusterforge/components/wellknown"
)

// PriorityClasses of the add-ons and workloads (L15).
const (
	SystemPriority      = "clusterforge-system"
	DefaultPriority     = "clusterforge-default"
	BalloonPriority     = "clusterforge-balloon"
	BorrowPriorityValue = 100
	SystemPriorityValue = 1_000_000
	// BalloonPriorityValue sits above cluster-autoscaler's expendable cutoff (ExpendablePodsCutoff),
	// so the autoscaler counts balloon pods and keeps their nodes, and below every real pod, so
	// real work preempts them at once.
	BalloonPriorityValue = -1
	// ExpendablePodsCutoff is --expendable-pods-priority-cutoff: pods below it do not hold nodes.
	ExpendablePodsCutoff = -10
	// ClusterCriticalPriority and NodeCriticalPriority are Kubernetes' built-in classes.
	ClusterCriticalPriority = "system-cluster-critical"
	NodeCriticalPriority    = "system-node-critical"
	// BalloonAppLabel labels balloon pods with their pool.
	BalloonAppLabel = "clusterforge.io/balloon"
)

// NodeReserve is what a balloon leaves of its node's allocatable: room for every add-on
// DaemonSet. A test keeps the DaemonSets' requests inside it.
var NodeReserve = corev1.ResourceList{
	corev1.ResourceCPU:    resource.MustParse("500m"),
	corev1.ResourceMemory: resource.MustParse("1Gi"),
}

func priorityClasses(c *spec.Cluster) []Object {
	never := corev1.PreemptNever
	objs := []Object{
		&schedulingv1.PriorityClass{ObjectMeta: metav1.ObjectMeta{Name: SystemPriority}, Value: SystemPriorityValue,
			Description: "Cluster add-ons that are not node-critical: monitoring and its like."},
		&schedulingv1.PriorityClass{ObjectMeta: metav1.ObjectMeta{Name: DefaultPriority}, Value: 1000, GlobalDefault: true,
			Description: "Every pod that names no class: above balloons, so it preempts them (L15)."},
		&schedulingv1.PriorityClass{ObjectMeta: metav1.ObjectMeta{Name: wellknown.BorrowPriority}, Value: BorrowPriorityValue,
			Description: "Pods that may run on other teams' idle nodes; the owners' pods preempt them (L17)."},
		&schedulingv1.PriorityClass{ObjectMeta: metav1.ObjectMeta{Name: BalloonPriority}, Value: BalloonPriorityValue,
			PreemptionPolicy: &never,
			Description:      "Balloon pods: keep warm nodes from looking idle to the autoscaler; preempted by any real pod (L15)."},
	}
	for _, pc := range c.Teams.PriorityClasses {
		objs = append(objs, &schedulingv1.PriorityClass{ObjectMeta: metav1.ObjectMeta{Name: pc.Name}, Value: int32(pc.Value),
			Description: "A class teams' pods may run at (the stack's teams.priorityClasses)."})
	}
	return objs
}

// BalloonName is the balloon Deployment of a pool.
func BalloonName(pool spec.Pool) string { return "balloon-" + pool.Name }

// BalloonRequests is one balloon pod: the largest pod a node of the pool takes, its allocatable
// (spec.Allocatable, as the kubelet's reservation leaves it) less NodeReserve, every GPU included,
// so each balloon holds a whole node (L15, L18).
func BalloonRequests(c *spec.Cluster, pool spec.Pool) corev1.ResourceList {
	capacity, _ := spec.VMCapacity(pool.VMSize) // Validate refuses sizes it does not know
	allocCPU, allocMemory := spec.Allocatable(capacity, pool.MaxPods)
	cpu := resource.NewMilliQuantity(allocCPU, resource.DecimalSI)
	cpu.Sub(NodeReserve[corev1.ResourceCPU])
	memory := resource.NewQuantity(allocMemory, resource.BinarySI)
	memory.Sub(NodeReserve[corev1.ResourceMemory])
	requests := corev1.ResourceList{corev1.ResourceCPU: *cpu, corev1.ResourceMemory: *memory}
	if capacity.GPUs > 0 {
		requests[machine.GPUResource] = *resource.NewQuantity(int64(capacity.GPUs), resource.DecimalSI)
	}
	return requests
}

// balloons are one Deployment per pool of pool.Nodes whole-node pause pods at the balloon
// priority, one per node by a required anti-affinity: a Deployment, not a DaemonSet, so the
// autoscaler can still remove the nodes beyond them (L15).
func balloons(c *spec.Cluster) []Object {
	var objs []Object
	for _, pool := range c.Pools {
		labels := map[string]string{BalloonAppLabel: pool.Name}
		requests := BalloonRequests(c, pool)
		objs = append(objs, &appsv1.Deployment{
			ObjectMeta: meta(SystemNamespace, BalloonName(pool), labels),
			Spec: appsv1.DeploymentSpec{
				Replicas: ptr(int32(pool.Nodes)),
				Selector: &metav1.LabelSelector{MatchLabels: labels},
				Strategy: replaceFirst(intOrPercent("10%")),
				Template: corev1.PodTemplateSpec{
					ObjectMeta: metav1.ObjectMeta{Labels: labels},
					Spec: corev1.PodSpec{
						PriorityClassName:             BalloonPriority,
						TerminationGracePeriodSeconds: ptr(int64(0)), // make room for the preemptor at once
						AutomountServiceAccountToken:  ptr(false),
						NodeSelector:                  map[string]string{wellknown.PoolLabel: pool.Name},
						Tolerations:                   poolTolerations(pool),
						Affinity: &corev1.Affinity{PodAntiAffinity: &corev1.PodAntiAffinity{
							RequiredDuringSchedulingIgnoredDuringExecution: []corev1.PodAffinityTerm{{
								LabelSelector: &metav1.LabelSelector{MatchLabels: labels},
								TopologyKey:   corev1.LabelHostname,
							}},
						}},
						Containers: []corev1.Container{{
							Name:      "balloon",
							Image:     c.Versions.PauseImage, // preloaded on every node (L25)
							Resources: corev1.ResourceRequirements{Requests: requests, Limits: gpuLimits(requests)},
						}},
					},
				},
			},
		})
	}
	return objs
}

// poolTolerations tolerate the pool's taints, so pods pinned to the pool can land there.
func poolTolerations(pool spec.Pool) []corev1.Toleration {
	var tolerations []corev1.Toleration
	for _, t := range machine.NodeTaints(pool) {
		tolerations = append(tolerations, corev1.Toleration{Key: t.Key, Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffect(t.Effect)})
	}
	return tolerations
}

// gpuLimits: extended resources must have limits equal to their requests.
func gpuLimits(requests corev1.ResourceList) corev1.ResourceList {
	gpus, ok := requests[machine.GPUResource]
	if !ok {
		return nil
	}
	return corev1.ResourceList{machine.GPUResource: gpus}
}
