// Package podsecurity shapes the test environment's pods to the Pod Security level the cluster
// asks of them.
package podsecurity

import (
	corev1 "k8s.io/api/core/v1"
	"k8s.io/utils/ptr"
)

// Restricted makes pod fit the restricted Pod Security level that team namespaces enforce and
// every other namespace warns about: a non-root user (the pause image's), no privilege
// escalation, no capabilities, the runtime's seccomp profile.
func Restricted(pod *corev1.Pod) *corev1.Pod {
	pod.Spec.SecurityContext = &corev1.PodSecurityContext{RunAsNonRoot: ptr.To(true), RunAsUser: ptr.To(int64(65535)),
		SeccompProfile: &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault}}
	for i := range pod.Spec.Containers {
		pod.Spec.Containers[i].SecurityContext = &corev1.SecurityContext{AllowPrivilegeEscalation: ptr.To(false),
			Capabilities: &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}}}
	}
	return pod
}
