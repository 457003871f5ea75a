package addons

import (
	"encoding/json"
	"path"
	"slices"

	"github.com/clusterforge/clusterforge/components/azurecloud"

	corev1 "k8s.io/api/core/v1"

	"github.com/clusterforge/clusterforge/components/spec"
	"github.com/clusterforge/clusterforge/components/wellknown"
)

// Workload Identity: a control loop that calls Azure trades a token of its own service account,
// for Entra ID's audience alone, for an Azure token. No identity sits on a node's metadata
// service for a pod to borrow, and Entra ID trusts only the federated subjects below.
const (
	// AzureTokenAudience is the audience Entra ID takes in a token exchange.
	AzureTokenAudience = "api://AzureADTokenExchange"
	azureTokenDir      = "/var/run/secrets/azure/tokens"
	azureTokenFile     = azureTokenDir + "/azure-identity-token"
	azureTokenSeconds  = 3600
	azureAddon         = "azure-identity"
	azureTokenVolume   = "azure-identity-token"
)

// The environment file, in a ConfigMap every pod with an Azure identity mounts.
const (
	AzureEnvironmentConfigMap = "azure-environment"
	azureEnvironmentDir       = "/etc/azure-environment"
	azureEnvironmentKey       = "environment.json"
)

// Federation is a workload's federated identity credential: Entra ID gives its identity's token for
// a token of Issuer, naming Subject, for Audience.
type Federation struct{ Issuer, Subject, Audience string }

// FederationOf is the federated credential of a workload (AzureWorkloads) of cluster c.
func FederationOf(c *spec.Cluster, workload string) Federation {
	return Federation{Issuer: c.ServiceAccountIssuer(), Subject: FederatedSubject(workload), Audience: AzureTokenAudience}
}

// AzureWorkloads are the service accounts (kube-system) with an Azure identity each, a
// user-assigned identity with a federated credential for FederatedSubject.
var AzureWorkloads = []string{AutoscalerName, wellknown.OpsName}

// FederatedSubject is the subject Entra ID matches a workload's token against.
func FederatedSubject(workload string) string { return ServiceAccountUser(SystemNamespace, workload) }

// Azure are the deploy-time values the workloads reach Azure with.
type Azure struct {
	SubscriptionID string `json:"subscriptionId"`
	TenantID       string `json:"tenantId"`
	// Cloud is azurecloud.Public on Azure.
	Cloud azurecloud.Cloud `json:"cloud"`
	// ClientIDs are the identities' client ids, by workload (AzureWorkloads).
	ClientIDs map[string]string `json:"clientIds"`
}

// AzureIdentityConfigMap names the ConfigMap a workload's pods read their identity from.
func AzureIdentityConfigMap(workload string) string { return workload + "-azure-identity" }

// AzureIdentity is that ConfigMap: the variables the Azure SDKs' workload identity credential reads.
func AzureIdentity(workload string, a Azure) (*corev1.ConfigMap, error) {
	cm := &corev1.ConfigMap{
		ObjectMeta: meta(SystemNamespace, AzureIdentityConfigMap(workload), nil),
		Data: map[string]string{
			"AZURE_CLIENT_ID": a.ClientIDs[workload], "AZURE_TENANT_ID": a.TenantID, "AZURE_AUTHORITY_HOST": a.Cloud.AuthorityHost,
		},
	}
	return cm, finish(cm, azureAddon)
}

// AzureEnvironment is the ConfigMap of the cloud's environment file.
func AzureEnvironment(a Azure) (*corev1.ConfigMap, error) {
	env, err := json.MarshalIndent(a.Cloud, "", "  ")
	if err != nil {
		return nil, err
	}
	cm := &corev1.ConfigMap{
		ObjectMeta: meta(SystemNamespace, AzureEnvironmentConfigMap, nil),
		Data:       map[string]string{azureEnvironmentKey: string(env)},
	}
	return cm, finish(cm, azureAddon)
}

// AzureObjects are the objects holding deploy-time Azure values: the cloud's environment, the
// identities' ConfigMaps and cluster-autoscaler's cloud config.
func AzureObjects(c *spec.Cluster, a Azure) ([]Object, error) {
	env, err := AzureEnvironment(a)
	if err != nil {
		return nil, err
	}
	objs := []Object{env}
	for _, w := range AzureWorkloads {
		cm, err := AzureIdentity(w, a)
		if err != nil {
			return nil, err
		}
		objs = append(objs, cm)
	}
	cloud, err := AutoscalerCloudConfig(c, a)
	if err != nil {
		return nil, err
	}
	return append(objs, cloud), nil
}

// withAzureIdentity gives the pod's first container its workload's identity: a projected token
// of its service account for Entra ID alone, the ConfigMap's variables, and the cloud's
// environment file.
func withAzureIdentity(p *corev1.PodSpec, workload string) {
	expiry := int64(azureTokenSeconds)
	p.Volumes = append(p.Volumes, corev1.Volume{Name: azureTokenVolume, VolumeSource: corev1.VolumeSource{
		Projected: &corev1.ProjectedVolumeSource{Sources: []corev1.VolumeProjection{{ServiceAccountToken: &corev1.ServiceAccountTokenProjection{
			Audience: AzureTokenAudience, ExpirationSeconds: &expiry, Path: path.Base(azureTokenFile),
		}}}},
	}})
	ct := &p.Containers[0]
	ct.VolumeMounts = append(ct.VolumeMounts, corev1.VolumeMount{Name: azureTokenVolume, MountPath: azureTokenDir, ReadOnly: true})
	p.Volumes = append(p.Volumes, corev1.Volume{Name: AzureEnvironmentConfigMap, VolumeSource: corev1.VolumeSource{
		ConfigMap: &corev1.ConfigMapVolumeSource{LocalObjectReference: corev1.LocalObjectReference{Name: AzureEnvironmentConfigMap}}}})
	ct.VolumeMounts = append(ct.VolumeMounts, corev1.VolumeMount{Name: AzureEnvironmentConfigMap, MountPath: azureEnvironmentDir, ReadOnly: true})
	ct.Env = append(ct.Env, corev1.EnvVar{Name: "AZURE_FEDERATED_TOKEN_FILE", Value: azureTokenFile},
		corev1.EnvVar{Name: azurecloud.FileEnv, Value: azureEnvironmentDir + "/" + azureEnvironmentKey})
	ct.EnvFrom = append(ct.EnvFrom, corev1.EnvFromSource{ConfigMapRef: &corev1.ConfigMapEnvSource{
		LocalObjectReference: corev1.LocalObjectReference{Name: AzureIdentityConfigMap(workload)}}})
}

// HasAzureIdentity says whether the pod signs in to Azure as its workload.
func HasAzureIdentity(p *corev1.PodSpec) bool {
	return slices.ContainsFunc(p.Volumes, func(v corev1.Volume) bool { return v.Name == azureTokenVolume })
}
