package addons

import (
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"

	"github.com/clusterforge/clusterforge/components/machine"
	"github.com/clusterforge/clusterforge/components/spec"
	"github.com/clusterforge/clusterforge/components/wellknown"
)

// DNS names the cluster DNS objects; the kubelets' clusterDNS points at its Service.
const (
	DNSName     = "coredns"
	DNSService  = "kube-dns"
	DNSAppLabel = "k8s-app"
)

// corefile answers cluster names from the API (EndpointSlices, L08) and forwards the rest to the
// VM's resolver; caching keeps the per-VM resolver under Azure's rate limit (L13).
const corefile = `.:53 {
    errors
    health {
        lameduck 5s
    }
    ready
    kubernetes ` + wellknown.ClusterDomain + ` in-addr.arpa ip6.arpa {
        pods disabled
        fallthrough in-addr.arpa ip6.arpa
        ttl 30
    }
    prometheus :9153
    forward . /etc/resolv.conf {
        max_concurrent 1000
    }
    cache 30
    loop
    reload
    loadbalance
}
`

// dns is CoreDNS: c.DNS.Replicas pods (sized from the node count), each on its own VM by a
// required anti-affinity, so bin-packing cannot stack them behind one VM's DNS limit (L13).
func dns(c *spec.Cluster) []Object {
	labels := map[string]string{DNSAppLabel: DNSService}
	ns := SystemNamespace
	// Sized for a 10,000-node cluster's services and EndpointSlices; the same on every stack.
	resources := corev1.ResourceRequirements{
		Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("500m"), corev1.ResourceMemory: resource.MustParse("512Mi")},
		Limits:   corev1.ResourceList{corev1.ResourceMemory: resource.MustParse("1Gi")},
	}
	tenPercent := intOrPercent("10%")
	port := func(name string, p int32, proto corev1.Protocol) corev1.ContainerPort {
		return corev1.ContainerPort{Name: name, ContainerPort: p, Protocol: proto}
	}
	objs := serviceAccount(ns, DNSName, []rbacv1.PolicyRule{
		{APIGroups: []string{""}, Resources: []string{"services", "namespaces"}, Verbs: []string{"list", "watch"}},
		{APIGroups: []string{"discovery.k8s.io"}, Resources: []string{"endpointslices"}, Verbs: []string{"list", "watch"}},
	}, nil)
	return append(objs,
		&corev1.ConfigMap{ObjectMeta: meta(ns, DNSName, nil), Data: map[string]string{"Corefile": corefile}},
		&appsv1.Deployment{
			ObjectMeta: meta(ns, DNSName, labels),
			Spec: appsv1.DeploymentSpec{
				Replicas: ptr(int32(c.DNS.Replicas)),
				Selector: &metav1.LabelSelector{MatchLabels: labels},
				Strategy: appsv1.DeploymentStrategy{Type: appsv1.RollingUpdateDeploymentStrategyType,
					RollingUpdate: &appsv1.RollingUpdateDeployment{MaxUnavailable: &tenPercent, MaxSurge: &tenPercent}},
				Template: corev1.PodTemplateSpec{
					ObjectMeta: metav1.ObjectMeta{Labels: labels},
					Spec: corev1.PodSpec{
						ServiceAccountName: DNSName,
						PriorityClassName:  ClusterCriticalPriority,
						DNSPolicy:          corev1.DNSDefault,
						NodeSelector:       map[string]string{corev1.LabelOSStable: "linux"},
						// The system pool's nodes too: one replica a node needs them all.
						Tolerations: []corev1.Toleration{{Key: "CriticalAddonsOnly", Operator: corev1.TolerationOpExists},
							{Key: machine.SystemPoolTaint.Key, Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffect(machine.SystemPoolTaint.Effect)}},
						Affinity: &corev1.Affinity{PodAntiAffinity: &corev1.PodAntiAffinity{
							RequiredDuringSchedulingIgnoredDuringExecution: []corev1.PodAffinityTerm{{
								LabelSelector: &metav1.LabelSelector{MatchLabels: labels},
								TopologyKey:   corev1.LabelHostname,
							}},
						}},
						Containers: []corev1.Container{{
							Name:         DNSName,
							Image:        coreDNSImage(c).Ref,
							Args:         []string{"-conf", "/etc/coredns/Corefile"},
							Resources:    resources,
							Ports:        []corev1.ContainerPort{port("dns", 53, corev1.ProtocolUDP), port("dns-tcp", 53, corev1.ProtocolTCP), port("metrics", 9153, corev1.ProtocolTCP)},
							VolumeMounts: []corev1.VolumeMount{{Name: "config", MountPath: "/etc/coredns", ReadOnly: true}},
							LivenessProbe: &corev1.Probe{ProbeHandler: httpGet("/health", 8080),
								InitialDelaySeconds: 60, TimeoutSeconds: 5, FailureThreshold: 5},
							ReadinessProbe: &corev1.Probe{ProbeHandler: httpGet("/ready", 8181)},
							SecurityContext: &corev1.SecurityContext{
								AllowPrivilegeEscalation: ptr(false), ReadOnlyRootFilesystem: ptr(true),
								Capabilities: &corev1.Capabilities{Add: []corev1.Capability{"NET_BIND_SERVICE"}, Drop: []corev1.Capability{"ALL"}},
							},
						}},
						Volumes: []corev1.Volume{{Name: "config", VolumeSource: corev1.VolumeSource{
							ConfigMap: &corev1.ConfigMapVolumeSource{LocalObjectReference: corev1.LocalObjectReference{Name: DNSName}}}}},
					},
				},
			},
		},
		&corev1.Service{
			ObjectMeta: meta(ns, DNSService, labels),
			Spec: corev1.ServiceSpec{
				Selector:  labels,
				ClusterIP: c.DNSServiceIP(),
				Ports: []corev1.ServicePort{
					{Name: "dns", Port: 53, Protocol: corev1.ProtocolUDP, TargetPort: intstr.FromInt32(53)},
					{Name: "dns-tcp", Port: 53, Protocol: corev1.ProtocolTCP, TargetPort: intstr.FromInt32(53)},
					{Name: "metrics", Port: 9153, Protocol: corev1.ProtocolTCP, TargetPort: intstr.FromInt32(9153)},
				},
			},
		},
		&policyv1.PodDisruptionBudget{
			ObjectMeta: meta(ns, DNSName, labels),
			Spec: policyv1.PodDisruptionBudgetSpec{
				MaxUnavailable: &tenPercent,
				Selector:       &metav1.LabelSelector{MatchLabels: labels},
			},
		},
	)
}

func httpGet(path string, port int32) corev1.ProbeHandler {
	return corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{Path: path, Port: intstr.FromInt32(port)}}
}

func ptr[T any](v T) *T { return &v }

func intOrPercent(s string) intstr.IntOrString { return intstr.FromString(s) }
