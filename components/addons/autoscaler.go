package addons

import (
	"encoding/json"
	"fmt"
	"strconv"

	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/api/resource"

	"github.com/clusterforge/clusterforge/components/azurecloud"
	"github.com/clusterforge/clusterforge/components/machine"
	"github.com/clusterforge/clusterforge/components/spec"
)

// Names of cluster-autoscaler's objects.
const (
	AutoscalerName = "cluster-autoscaler"
	// AutoscalerCloudConfigSecret holds the Azure provider's cloud config; the services program
	// fills it from deploy-time values (AutoscalerCloudConfig).
	AutoscalerCloudConfigSecret = "cluster-autoscaler-azure"
	autoscalerCloudConfigKey    = "cloud-config"
	autoscalerCloudConfigDir    = "/etc/cluster-autoscaler"
	autoscalerAddon             = "autoscaler"
)

// AutoscalerFlags are cluster-autoscaler's flags: every scale set between 0 and its share of the
// pool's capacity (L19), the unready brake and the scale-down limits from the spec, and the
// balloon priority counted as real work (L15).
func AutoscalerFlags(c *spec.Cluster) []string {
	a := c.Autoscaler
	flags := []string{
		"--cloud-provider=azure",
		"--cloud-config=" + autoscalerCloudConfigDir + "/" + autoscalerCloudConfigKey,
		"--leader-elect=true",
		"--scan-interval=" + strconv.Itoa(spec.AutoscalerScanSeconds) + "s",
		// A gang past the gang-room gate grows a group that can take all its pods (the most),
		// not one with room for part of it; ties go to the least waste.
		"--expander=most-pods,least-waste",
		"--balance-similar-node-groups=true", // the scale sets of one split pool grow together
		"--expendable-pods-priority-cutoff=" + strconv.Itoa(ExpendablePodsCutoff),
		"--max-total-unready-percentage=" + strconv.Itoa(a.MaxUnreadyPercentage),
		"--ok-total-unready-count=" + strconv.Itoa(a.OkUnreadyCount),
		"--scale-down-unneeded-time=" + a.ScaleDownUnneededTime,
		"--scale-down-delay-after-add=" + a.ScaleDownDelayAfterAdd,
		"--max-scale-down-parallelism=" + strconv.Itoa(a.MaxScaleDownParallelism),
		"--max-node-provision-time=" + a.MaxNodeProvisionTime,
		"--max-nodes-total=" + strconv.Itoa(c.TargetNodes),
		"--max-nodes-per-scaleup=" + strconv.Itoa(c.Joins.Step), // L11: one step of joins per loop
		"--startup-taint=" + machine.PreflightTaint.Key,         // L36: a node under test is coming, not unusable
		// DNS and balloons live in kube-system; their PDBs and priority decide, not their namespace.
		"--skip-nodes-with-system-pods=false",
		"--skip-nodes-with-local-storage=false",
		// Its ToBeDeleted taint keeps pods off a node it removes, and the brake counts the taint; a
		// cordon it does not count, so only clusterforge-ops cordons (NodeControllersPolicy), and
		// the autoscaler's default cordon would fail every scale-down.
		"--cordon-node-before-terminating=false",
	}
	for _, set := range c.ScaleSets() {
		flags = append(flags, fmt.Sprintf("--nodes=%d:%d:%s", 0, set.MaxNodes, set.AzureName))
	}
	return flags
}

// AutoscalerCloudConfig is the Azure provider's cloud config Secret: the cluster's resource group
// and scale sets, reached with the autoscaler's workload identity, its reads and writes held to
// its share of Compute's limits at full size, and a scale set's size written only over the model
// it read (If-Match), so a resize never undoes another writer's.
func AutoscalerCloudConfig(c *spec.Cluster, a Azure) (*corev1.Secret, error) {
	readQPS, readBucket := spec.AutoscalerReadRate()
	writeQPS, writeBucket := spec.AutoscalerWriteRate()
	cfg, err := json.MarshalIndent(azurecloud.AutoscalerConfig{
		Cloud: a.Cloud.Name, Location: c.Location, SubscriptionID: a.SubscriptionID, TenantID: a.TenantID,
		ResourceGroup: c.ResourceGroup(), VMType: "vmss",
		UseWorkloadIdentityExtension: true, AADClientID: a.ClientIDs[AutoscalerName], AADFederatedTokenFile: azureTokenFile,
		VMSSCacheTTLInSeconds:                spec.AutoscalerRefreshSeconds,
		VMSSVirtualMachinesCacheTTLInSeconds: c.AutoscalerInstancesTTLSeconds(),
		VMSSVMsCacheJitter:                   c.AutoscalerInstancesJitterSeconds(), // a restart's lists drift apart
		CloudProviderRateLimit:               true,
		CloudProviderRateLimitQPS:            readQPS, CloudProviderRateLimitBucket: readBucket,
		CloudProviderRateLimitQPSWrite: writeQPS, CloudProviderRateLimitBucketWrite: writeBucket,
		EnableVMSSEtag: true,
	}, "", "  ")
	if err != nil {
		return nil, err
	}
	s := &corev1.Secret{
		ObjectMeta: meta(SystemNamespace, AutoscalerCloudConfigSecret, nil),
		StringData: map[string]string{autoscalerCloudConfigKey: string(cfg)},
	}
	return s, finish(s, autoscalerAddon)
}

func autoscaler(c *spec.Cluster) []Object {
	read := []string{"get", "list", "watch"}
	objs := serviceAccount(SystemNamespace, AutoscalerName, []rbacv1.PolicyRule{
		{APIGroups: []string{""}, Resources: []string{"events", "endpoints"}, Verbs: []string{"create", "patch"}},
		{APIGroups: []string{""}, Resources: []string{"pods/eviction"}, Verbs: []string{"create"}},
		{APIGroups: []string{""}, Resources: []string{"pods/status"}, Verbs: []string{"update"}},
		{APIGroups: []string{""}, Resources: []string{"nodes"}, Verbs: []string{"get", "list", "watch", "update", "patch", "delete"}},
		{APIGroups: []string{""}, Resources: []string{"namespaces", "pods", "services", "replicationcontrollers", "persistentvolumeclaims", "persistentvolumes"}, Verbs: read},
		{APIGroups: []string{"apps"}, Resources: []string{"daemonsets", "replicasets", "statefulsets"}, Verbs: read},
		{APIGroups: []string{"batch"}, Resources: []string{"jobs", "cronjobs"}, Verbs: read},
		{APIGroups: []string{"policy"}, Resources: []string{"poddisruptionbudgets"}, Verbs: read},
		{APIGroups: []string{"storage.k8s.io"}, Resources: []string{"storageclasses", "csinodes", "csidrivers", "csistoragecapacities", "volumeattachments"}, Verbs: read},
		// Its informers must sync before its first loop: without these it waits forever.
		{APIGroups: []string{""}, Resources: []string{"podtemplates"}, Verbs: read},
		{APIGroups: []string{"resource.k8s.io"}, Resources: []string{"resourceslices", "deviceclasses", "resourceclaims"}, Verbs: read},
	}, append(leaderElection(AutoscalerName),
		rbacv1.PolicyRule{APIGroups: []string{""}, Resources: []string{"configmaps"}, Verbs: []string{"create", "list", "watch"}},
		rbacv1.PolicyRule{APIGroups: []string{""}, Resources: []string{"configmaps"}, ResourceNames: []string{"cluster-autoscaler-status"}, Verbs: []string{"get", "update", "delete"}},
	))
	pod := corev1.PodSpec{
		Containers: []corev1.Container{{
			Name:    AutoscalerName,
			Image:   "registry.k8s.io/autoscaling/cluster-autoscaler:" + c.Versions.ClusterAutoscaler,
			Command: append([]string{"./cluster-autoscaler"}, AutoscalerFlags(c)...),
			Resources: corev1.ResourceRequirements{
				Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("1"), corev1.ResourceMemory: resource.MustParse("2Gi")},
				Limits:   corev1.ResourceList{corev1.ResourceMemory: resource.MustParse("4Gi")},
			},
			VolumeMounts: []corev1.VolumeMount{{Name: "cloud-config", MountPath: autoscalerCloudConfigDir, ReadOnly: true}},
		}},
		Volumes: []corev1.Volume{{Name: "cloud-config", VolumeSource: corev1.VolumeSource{
			Secret: &corev1.SecretVolumeSource{SecretName: AutoscalerCloudConfigSecret}}}},
	}
	withAzureIdentity(&pod, AutoscalerName)
	return append(objs, systemDeployment(c, SystemNamespace, AutoscalerName, ClusterCriticalPriority, pod))
}
