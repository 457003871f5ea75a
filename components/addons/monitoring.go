package addons

import (
	"strconv"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	psaapi "k8s.io/pod-security-admission/api"

	"github.com/clusterforge/clusterforge/components/spec"
	"github.com/clusterforge/clusterforge/components/wellknown"
)

// Names of the monitoring objects.
const (
	PrometheusName   = "prometheus"
	NodeExporterName = "node-exporter"
	// maxPrometheusCPUs: 24 cores replay the WAL fast on many-core hosts (L34).
	maxPrometheusCPUs = 24
)

// PrometheusResources: memory grows with the series of every node, so Prometheus gets a quarter of
// the control plane's node count in GiB of memory, between 8 GiB and the largest pod the system
// pool takes; a CPU per 4 GiB, at most 24 (L34) and at most the largest pod's.
func PrometheusResources(c *spec.Cluster) (cpus int, memory resource.Quantity) {
	largest := BalloonRequests(c, c.SystemPool())
	memGiB := min(max(8, c.TargetNodes/40), int(largest.Memory().Value()>>30))
	cpus = min(max(1, memGiB/4), maxPrometheusCPUs, int(largest.Cpu().MilliValue()/1000))
	return cpus, *resource.NewQuantity(int64(memGiB)<<30, resource.BinarySI)
}

// monitoring is Prometheus (one per cluster: every discovery watch is a single watch, L07) and
// node-exporter, a DaemonSet that never talks to the API.
func monitoring(c *spec.Cluster) []Object {
	ns := MonitoringNamespace
	files, err := PrometheusFiles(c)
	if err != nil {
		panic(err) // plain structs always marshal
	}
	cpus, memory := PrometheusResources(c)
	cpu := *resource.NewQuantity(int64(cpus), resource.DecimalSI)
	prometheus := systemDeployment(c, ns, PrometheusName, SystemPriority, corev1.PodSpec{
		SecurityContext: &corev1.PodSecurityContext{RunAsNonRoot: ptr(true), RunAsUser: ptr(int64(65534)), FSGroup: ptr(int64(65534))},
		Containers: []corev1.Container{{
			Name:  PrometheusName,
			Image: prometheusImage(c).Ref,
			Args: []string{
				"--config.file=" + PrometheusConfigDir + "/" + PrometheusConfigFile,
				"--storage.tsdb.path=/prometheus",
				"--storage.tsdb.retention.time=15d",
				// Bound what one query may cost (L34).
				"--query.timeout=2m",
				"--query.max-samples=50000000",
				"--query.max-concurrency=20",
			},
			// The Go runtime would see the host's cores, not the pod's share (L34).
			Env:   []corev1.EnvVar{{Name: "GOMAXPROCS", Value: strconv.Itoa(cpus)}},
			Ports: []corev1.ContainerPort{{Name: "web", ContainerPort: 9090}},
			Resources: corev1.ResourceRequirements{
				Requests: corev1.ResourceList{corev1.ResourceCPU: cpu, corev1.ResourceMemory: memory},
				Limits:   corev1.ResourceList{corev1.ResourceMemory: memory},
			},
			ReadinessProbe: &corev1.Probe{ProbeHandler: httpGet("/-/ready", 9090)},
			VolumeMounts: []corev1.VolumeMount{
				{Name: "config", MountPath: PrometheusConfigDir, ReadOnly: true},
				{Name: "data", MountPath: "/prometheus"},
			},
		}},
		Volumes: []corev1.Volume{
			{Name: "config", VolumeSource: corev1.VolumeSource{ConfigMap: &corev1.ConfigMapVolumeSource{
				LocalObjectReference: corev1.LocalObjectReference{Name: PrometheusName}}}},
			// The node's local SSD (L22); history is rebuilt, not backed up.
			{Name: "data", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}},
		},
	})
	prometheus.Spec.Strategy = appsv1.DeploymentStrategy{Type: appsv1.RecreateDeploymentStrategyType} // one writer of the TSDB
	// node-exporter reads the host: its network, processes and filesystems.
	objs := []Object{namespace(ns, psaapi.LevelPrivileged)}
	objs = append(objs, serviceAccount(ns, PrometheusName, []rbacv1.PolicyRule{
		{APIGroups: []string{""}, Resources: []string{"nodes", "services", "pods"}, Verbs: []string{"get", "list", "watch"}},
		{APIGroups: []string{"discovery.k8s.io"}, Resources: []string{"endpointslices"}, Verbs: []string{"get", "list", "watch"}},
		{NonResourceURLs: []string{"/metrics"}, Verbs: []string{"get"}},
	}, nil)...)
	// node-exporter reads /proc and /sys of its own node only: no API access at all (L07).
	return append(append(objs,
		&corev1.ConfigMap{ObjectMeta: meta(ns, PrometheusName, nil), Data: files},
		prometheus), nodeAgent(ns, NodeExporterName, corev1.PodSpec{
		HostNetwork:     true,
		HostPID:         true,
		Tolerations:     []corev1.Toleration{{Operator: corev1.TolerationOpExists}},
		SecurityContext: &corev1.PodSecurityContext{RunAsNonRoot: ptr(true), RunAsUser: ptr(int64(65534))},
		Containers: []corev1.Container{{
			Name:  NodeExporterName,
			Image: nodeExporterImage(c).Ref,
			Args: []string{
				"--path.procfs=/host/proc", "--path.sysfs=/host/sys", "--path.rootfs=/host/root",
				"--web.listen-address=:" + strconv.Itoa(wellknown.NodeExporterPort),
			},
			Ports:     []corev1.ContainerPort{{Name: "metrics", ContainerPort: wellknown.NodeExporterPort}},
			Resources: NodeExporterResources,
			VolumeMounts: []corev1.VolumeMount{
				{Name: "proc", MountPath: "/host/proc", ReadOnly: true},
				{Name: "sys", MountPath: "/host/sys", ReadOnly: true},
				{Name: "root", MountPath: "/host/root", ReadOnly: true, MountPropagation: ptr(corev1.MountPropagationHostToContainer)},
			},
		}},
		Volumes: []corev1.Volume{hostPath("proc", "/proc"), hostPath("sys", "/sys"), hostPath("root", "/")},
	})...)
}

// nodeAgent is a DaemonSet of one pod per node at node-critical priority, rolled 10% at a time,
// with a service account that holds no token: node agents read their node, not the API.
func nodeAgent(namespace, name string, pod corev1.PodSpec) []Object {
	labels := map[string]string{"app": name}
	pod.ServiceAccountName, pod.AutomountServiceAccountToken, pod.PriorityClassName = name, ptr(false), NodeCriticalPriority
	return []Object{
		&corev1.ServiceAccount{ObjectMeta: meta(namespace, name, nil), AutomountServiceAccountToken: ptr(false)},
		&appsv1.DaemonSet{
			ObjectMeta: meta(namespace, name, labels),
			Spec: appsv1.DaemonSetSpec{
				Selector: &metav1.LabelSelector{MatchLabels: labels},
				UpdateStrategy: appsv1.DaemonSetUpdateStrategy{Type: appsv1.RollingUpdateDaemonSetStrategyType,
					RollingUpdate: &appsv1.RollingUpdateDaemonSet{MaxUnavailable: ptr(intOrPercent("10%"))}},
				Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: labels}, Spec: pod},
			},
		},
	}
}

// NodeExporterResources are node-exporter's requests and limits; NodeReserve leaves room for them.
var NodeExporterResources = corev1.ResourceRequirements{
	Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("100m"), corev1.ResourceMemory: resource.MustParse("128Mi")},
	Limits:   corev1.ResourceList{corev1.ResourceMemory: resource.MustParse("256Mi")},
}

func hostPath(name, path string) corev1.Volume {
	return corev1.Volume{Name: name, VolumeSource: corev1.VolumeSource{HostPath: &corev1.HostPathVolumeSource{Path: path}}}
}
