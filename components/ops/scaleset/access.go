package scaleset

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log"
	"os"
	"strings"
	"sync/atomic"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore"
	"github.com/Azure/azure-sdk-for-go/sdk/azcore/arm"
	"github.com/Azure/azure-sdk-for-go/sdk/azcore/policy"
	"github.com/Azure/azure-sdk-for-go/sdk/azidentity"
	"github.com/Azure/azure-sdk-for-go/sdk/resourcemanager/compute/armcompute/v6"
	"github.com/Azure/azure-sdk-for-go/sdk/resourcemanager/network/armnetwork/v6"

	"github.com/clusterforge/clusterforge/components/azurecloud"
)

// Access is how the controller reaches the worker scale sets: the cluster's subscription and
// resource group from the cloud config, the cloud from its environment file, and the pod's
// workload identity.
type Access struct {
	Cloud         azurecloud.Cloud
	Subscription  string
	ResourceGroup string
	ScaleSets     []string
	// Transport carries the requests; nil is the SDK's own.
	Transport policy.Transporter
}

// ReadAccess reads the cloud config (cluster-autoscaler's, which names the subscription and the
// resource group) and the environment file.
func ReadAccess(cloudConfig, environment string, scaleSets []string) (*Access, error) {
	data, err := os.ReadFile(cloudConfig)
	if err != nil {
		return nil, err
	}
	var cfg azurecloud.AutoscalerConfig
	if err := json.Unmarshal(data, &cfg); err != nil {
		return nil, fmt.Errorf("%s: %w", cloudConfig, err)
	}
	var sets []string
	for _, set := range scaleSets {
		if set = strings.TrimSpace(set); set != "" {
			sets = append(sets, set)
		}
	}
	if len(sets) == 0 {
		return nil, errors.New("scaleset: no worker scale sets")
	}
	env, err := azurecloud.Read(environment)
	if err != nil {
		return nil, err
	}
	return &Access{Cloud: env, Subscription: cfg.SubscriptionID, ResourceGroup: cfg.ResourceGroup, ScaleSets: sets}, nil
}

// Machines are the scale sets reached with a fresh credential: the client id, tenant and token
// file come from the pod's environment, Entra ID's host from the cloud. MSAL's instance discovery
// asks the public cloud's Entra ID, so a private cloud (Azure Stack Hub) goes without it, as the
// SDK says to.
func (a *Access) Machines() (*Machines, error) {
	cred, err := a.credential()
	if err != nil {
		return nil, err
	}
	return a.MachinesAs(cred)
}

// credential is the pod's workload identity, fresh (no cached token).
func (a *Access) credential() (azcore.TokenCredential, error) {
	cred, err := azidentity.NewWorkloadIdentityCredential(&azidentity.WorkloadIdentityCredentialOptions{
		DisableInstanceDiscovery: a.Cloud.Name != azurecloud.Public.Name, ClientOptions: policy.ClientOptions{Cloud: a.Cloud.SDK()}})
	if err != nil {
		return nil, fmt.Errorf("workload identity: %w", err)
	}
	return cred, nil
}

// MachinesAs are the scale sets reached with cred.
func (a *Access) MachinesAs(cred azcore.TokenCredential) (*Machines, error) {
	vms, err := armcompute.NewVirtualMachineScaleSetVMsClient(a.Subscription, cred, a.options())
	if err != nil {
		return nil, err
	}
	nics, err := armnetwork.NewInterfacesClient(a.Subscription, cred, a.options())
	if err != nil {
		return nil, err
	}
	return &Machines{VMs: vms, NICs: nics, Subscription: a.Subscription, ResourceGroup: a.ResourceGroup, ScaleSets: a.ScaleSets}, nil
}

// ScaleSetsAs is a client of the scale sets themselves (their models and tags), with cred.
func (a *Access) ScaleSetsAs(cred azcore.TokenCredential) (*armcompute.VirtualMachineScaleSetsClient, error) {
	return armcompute.NewVirtualMachineScaleSetsClient(a.Subscription, cred, a.options())
}

func (a *Access) options() *arm.ClientOptions {
	return &arm.ClientOptions{ClientOptions: policy.ClientOptions{Cloud: a.Cloud.SDK(), Transport: a.Transport}}
}

// KeepSignedIn proves the access works, at once and then every 10 minutes (every 30 s while it
// does not): a fresh credential (no cached token) reads the first worker scale set's instances,
// which signs in at Entra ID and exercises the role remediation relies on. A broken federation
// or grant shows at start and whenever it breaks, not at the next repair.
func KeepSignedIn(ctx context.Context, a *Access, signedIn *atomic.Bool) {
	for {
		wait := 10 * time.Minute
		m, err := a.Machines()
		if err == nil {
			_, err = m.VMs.NewListPager(a.ResourceGroup, a.ScaleSets[0], nil).NextPage(ctx)
		}
		switch {
		case err == nil && !signedIn.Load():
			log.Printf("azure: signed in through the workload identity and read scale set %s", a.ScaleSets[0])
		case err != nil:
			log.Printf("azure: cannot read scale set %s through the workload identity, remediation cannot hand machines back: %v", a.ScaleSets[0], err)
			wait = 30 * time.Second
		}
		signedIn.Store(err == nil)
		select {
		case <-ctx.Done():
			return
		case <-time.After(wait):
		}
	}
}
