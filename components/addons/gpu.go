package addons

import (
	"slices"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"

	"github.com/clusterforge/clusterforge/components/machine"
	"github.com/clusterforge/clusterforge/components/spec"
	"github.com/clusterforge/clusterforge/components/wellknown"
)

// NvidiaDevicePluginName names NVIDIA's device plugin, which advertises each GPU node's GPUs to
// its kubelet as nvidia.com/gpu.
const NvidiaDevicePluginName = "nvidia-device-plugin"

// NvidiaDevicePluginResources are its requests and limits; NodeReserve leaves room for them.
var NvidiaDevicePluginResources = corev1.ResourceRequirements{
	Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("50m"), corev1.ResourceMemory: resource.MustParse("64Mi")},
	Limits:   corev1.ResourceList{corev1.ResourceMemory: resource.MustParse("256Mi")},
}

// nvidiaDevicePlugin runs on GPU nodes only (wellknown.GPULabel), tolerating their taint, with the
// pinned upstream image: it needs a GPU and NVIDIA's driver to do anything, so nothing here builds
// or runs it. A GPU that fails to initialise fails the pod rather than advertising fewer GPUs.
func nvidiaDevicePlugin(c *spec.Cluster) []Object {
	if !slices.ContainsFunc(c.Pools, spec.Pool.IsGPU) {
		return nil
	}
	return nodeAgent(SystemNamespace, NvidiaDevicePluginName, corev1.PodSpec{
		NodeSelector: map[string]string{wellknown.GPULabel: "true"},
		Tolerations:  []corev1.Toleration{{Operator: corev1.TolerationOpExists}},
		Containers: []corev1.Container{{
			Name:  NvidiaDevicePluginName,
			Image: "nvcr.io/nvidia/k8s-device-plugin:" + c.Versions.NvidiaDevicePlugin,
			Env: []corev1.EnvVar{
				{Name: "FAIL_ON_INIT_ERROR", Value: "true"},
				{Name: "MIG_STRATEGY", Value: "none"},
				// The GPU image's runtime takes devices only this way (machine.NvidiaCTKConfig).
				{Name: "DEVICE_LIST_STRATEGY", Value: machine.NvidiaDeviceListStrategy},
			},
			Resources: NvidiaDevicePluginResources,
			// Privileged: the runtime gives an unprivileged container no GPU it was not allocated,
			// and the plugin must see them all.
			SecurityContext: &corev1.SecurityContext{Privileged: ptr(true)},
			VolumeMounts:    []corev1.VolumeMount{{Name: "device-plugins", MountPath: "/var/lib/kubelet/device-plugins"}},
		}},
		Volumes: []corev1.Volume{hostPath("device-plugins", "/var/lib/kubelet/device-plugins")},
	})
}
