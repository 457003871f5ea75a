// Package azurecloud names the Azure cloud the cluster's workloads call: its Resource Manager and
// Entra ID. Every workload with an Azure identity reads it from one environment file, in the
// format cluster-autoscaler's Azure provider reads a custom cloud from (AZURE_ENVIRONMENT_FILEPATH).
package azurecloud

import (
	"encoding/json"
	"fmt"
	"os"
	"strings"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore/cloud"
	// Registers Resource Manager's endpoints in the SDK's clouds, which Public reads.
	_ "github.com/Azure/azure-sdk-for-go/sdk/azcore/arm/runtime"
)

// Cloud is one Azure cloud's endpoints.
type Cloud struct {
	// Name is the cloud config's "cloud": AzurePublicCloud, or AzureStackCloud for a cloud only the
	// environment file describes.
	Name                    string `json:"name"`
	ResourceManagerEndpoint string `json:"resourceManagerEndpoint"`
	// AuthorityHost is Entra ID's sign-in host.
	AuthorityHost string `json:"activeDirectoryEndpoint"`
	// TokenAudience is the audience of Resource Manager's tokens.
	TokenAudience string `json:"tokenAudience"`
}

// FileEnv names the environment file, as cluster-autoscaler's Azure provider reads it.
const FileEnv = "AZURE_ENVIRONMENT_FILEPATH"

// Public is Azure's public cloud, as the Azure SDK for Go names its endpoints.
var Public = Cloud{
	Name:                    "AzurePublicCloud",
	ResourceManagerEndpoint: cloud.AzurePublic.Services[cloud.ResourceManager].Endpoint,
	AuthorityHost:           cloud.AzurePublic.ActiveDirectoryAuthorityHost,
	TokenAudience:           cloud.AzurePublic.Services[cloud.ResourceManager].Audience,
}

// ScopeSuffix ends a client-credentials scope: the resource it names, then this.
const ScopeSuffix = "/.default"

// Scope is the token scope of Resource Manager's clients: its audience and ScopeSuffix.
func (c Cloud) Scope() string { return c.TokenAudience + ScopeSuffix }

// SDK is the cloud as the Azure SDK's clients take it.
func (c Cloud) SDK() cloud.Configuration {
	return cloud.Configuration{ActiveDirectoryAuthorityHost: c.AuthorityHost, Services: map[cloud.ServiceName]cloud.ServiceConfiguration{
		cloud.ResourceManager: {Endpoint: c.ResourceManagerEndpoint, Audience: c.TokenAudience}}}
}

// Read reads an environment file; every endpoint must be an https URL.
func Read(file string) (Cloud, error) {
	data, err := os.ReadFile(file)
	if err != nil {
		return Cloud{}, err
	}
	var c Cloud
	if err := json.Unmarshal(data, &c); err != nil {
		return Cloud{}, fmt.Errorf("%s: %w", file, err)
	}
	for name, url := range map[string]string{"resourceManagerEndpoint": c.ResourceManagerEndpoint, "activeDirectoryEndpoint": c.AuthorityHost, "tokenAudience": c.TokenAudience} {
		if !strings.HasPrefix(url, "https://") {
			return Cloud{}, fmt.Errorf("%s: %s %q is not an https URL", file, name, url)
		}
	}
	return c, nil
}

// AutoscalerConfig is cluster-autoscaler's Azure cloud config (its provider's azure_config.go
// keys, 1.36): the add-ons write it into a Secret, and clusterforge-ops, which mounts the same
// Secret, reads the subscription and resource group from it.
type AutoscalerConfig struct {
	Cloud                        string `json:"cloud"`
	Location                     string `json:"location"`
	SubscriptionID               string `json:"subscriptionId"`
	TenantID                     string `json:"tenantId"`
	ResourceGroup                string `json:"resourceGroup"`
	VMType                       string `json:"vmType"`
	UseWorkloadIdentityExtension bool   `json:"useWorkloadIdentityExtension"`
	AADClientID                  string `json:"aadClientID"`
	AADFederatedTokenFile        string `json:"aadFederatedTokenFile"`
	// VMSSCacheTTLInSeconds is how long its list of scale sets is kept; the VM lists' TTL and
	// their splay follow.
	VMSSCacheTTLInSeconds                int  `json:"vmssCacheTTLInSeconds"`
	VMSSVirtualMachinesCacheTTLInSeconds int  `json:"vmssVirtualMachinesCacheTTLInSeconds"`
	VMSSVMsCacheJitter                   int  `json:"vmssVmsCacheJitter"`
	CloudProviderRateLimit               bool `json:"cloudProviderRateLimit"`
	// Each client's reads and writes: a token bucket's refill a second, and its size.
	CloudProviderRateLimitQPS         float64 `json:"cloudProviderRateLimitQPS"`
	CloudProviderRateLimitBucket      int     `json:"cloudProviderRateLimitBucket"`
	CloudProviderRateLimitQPSWrite    float64 `json:"cloudProviderRateLimitQPSWrite"`
	CloudProviderRateLimitBucketWrite int     `json:"cloudProviderRateLimitBucketWrite"`
	// EnableVMSSEtag sends the model's ETag with each scale-set write (If-Match).
	EnableVMSSEtag bool `json:"enableVMSSEtag"`
}
