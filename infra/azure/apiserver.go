package azure

import (
	"github.com/pulumi/pulumi-azure-native-sdk/compute/v2"
	"github.com/pulumi/pulumi-azure-native-sdk/network/v2"
	"github.com/pulumi/pulumi/sdk/v3/go/pulumi"

	"github.com/clusterforge/clusterforge/components/spec"
	"github.com/clusterforge/clusterforge/components/wellknown"
)

// APIServerGroupArgs configures NewAPIServerGroup.
type APIServerGroupArgs struct {
	Cluster           *spec.Cluster
	ResourceGroupName pulumi.StringInput
	ResourceGroupID   pulumi.StringInput
	SubnetID          pulumi.StringInput
	IdentityID        pulumi.StringInput
	CustomData        pulumi.StringInput
	Login             Login
}

// APIServerGroup is the apiserver scale set (controller-manager and scheduler colocated, L05)
// behind an internal Standard load balancer on 6443.
type APIServerGroup struct {
	pulumi.ResourceState

	Endpoint pulumi.StringOutput
	// ScaleSetID is the apiserver scale set's resource id: clusterforge-ops reads its repairs' state.
	ScaleSetID pulumi.StringOutput
}

// Load balancer sub-resource names.
const (
	lbFrontend = "apiserver"
	lbBackend  = "apiservers"
	lbProbe    = "readyz"
)

// LoadBalancerArgs is the internal load balancer: a static frontend in the control-plane subnet
// and an HTTPS probe on spec.APIServerProbePath, which leaves the events etcd out of readiness.
func LoadBalancerArgs(a *APIServerGroupArgs, lbName string) *network.LoadBalancerArgs {
	c := a.Cluster
	ref := func(kind, name string) *network.SubResourceArgs {
		return &network.SubResourceArgs{Id: lbPart(a.ResourceGroupID, lbName, kind, name)}
	}
	return &network.LoadBalancerArgs{
		ResourceGroupName: a.ResourceGroupName, Location: pulumi.String(c.Location), LoadBalancerName: pulumi.String(lbName),
		Tags: tags(c, spec.RoleAPIServer), Sku: &network.LoadBalancerSkuArgs{Name: pulumi.String("Standard")},
		FrontendIPConfigurations: network.FrontendIPConfigurationArray{network.FrontendIPConfigurationArgs{
			Name: pulumi.String(lbFrontend), PrivateIPAllocationMethod: pulumi.String("Static"),
			PrivateIPAddress: pulumi.String(c.Network.APIServerIP), Subnet: &network.SubnetTypeArgs{Id: a.SubnetID},
			Zones: pulumi.ToStringArray(c.Zones),
		}},
		BackendAddressPools: network.BackendAddressPoolArray{network.BackendAddressPoolArgs{Name: pulumi.String(lbBackend)}},
		Probes: network.ProbeArray{network.ProbeArgs{
			Name: pulumi.String(lbProbe), Protocol: pulumi.String("Https"), Port: pulumi.Int(wellknown.APIServerPort),
			RequestPath: pulumi.String(spec.APIServerProbePath), IntervalInSeconds: pulumi.Int(spec.APIServerProbeIntervalSeconds), NumberOfProbes: pulumi.Int(spec.APIServerProbeFailures),
		}},
		LoadBalancingRules: network.LoadBalancingRuleArray{network.LoadBalancingRuleArgs{
			Name: pulumi.String("apiserver"), Protocol: pulumi.String("Tcp"),
			FrontendPort: pulumi.Int(wellknown.APIServerPort), BackendPort: pulumi.Int(wellknown.APIServerPort),
			FrontendIPConfiguration: ref("frontendIPConfigurations", lbFrontend),
			BackendAddressPool:      ref("backendAddressPools", lbBackend),
			Probe:                   ref("probes", lbProbe),
			EnableTcpReset:          pulumi.Bool(true), IdleTimeoutInMinutes: pulumi.Int(30),
		}},
	}
}

// lbPart is the resource ID of one of the load balancer's parts: a frontend, pool or probe.
func lbPart(groupID pulumi.StringInput, lbName, kind, name string) pulumi.StringOutput {
	return pulumi.Sprintf("%s/providers/Microsoft.Network/loadBalancers/%s/%s/%s", groupID, lbName, kind, name)
}

// NewAPIServerGroup builds the load balancer and the apiserver scale set.
func NewAPIServerGroup(ctx *pulumi.Context, name string, args *APIServerGroupArgs, opts ...pulumi.ResourceOption) (*APIServerGroup, error) {
	comp := &APIServerGroup{}
	if err := ctx.RegisterComponentResource("clusterforge:azure:APIServerGroup", name, comp, opts...); err != nil {
		return nil, err
	}
	c, parent := args.Cluster, pulumi.Parent(comp)
	lbName := c.APIServerName()
	lb, err := network.NewLoadBalancer(ctx, name+"-lb", LoadBalancerArgs(args, lbName), parent)
	if err != nil {
		return nil, err
	}
	backend := lbPart(args.ResourceGroupID, lbName, "backendAddressPools", lbBackend)
	vmss, err := compute.NewVirtualMachineScaleSet(ctx, name+"-vmss", ScaleSetArgs(ScaleSetSpec{
		Cluster: c, Role: spec.RoleAPIServer, Name: c.APIServerName(), VMSize: c.APIServer.VMSize, ImageID: c.ControlPlaneImage,
		Capacity: c.APIServer.Count, IPConfigurations: 1, SubnetID: args.SubnetID, BackendPoolIDs: []pulumi.StringInput{backend},
		IdentityID: args.IdentityID, CustomData: args.CustomData, Login: args.Login, ResourceGroupName: args.ResourceGroupName,
		Repairs: true,
	}), parent, pulumi.DependsOn([]pulumi.Resource{lb}))
	if err != nil {
		return nil, err
	}
	comp.Endpoint, comp.ScaleSetID = pulumi.String(c.APIServerURL()).ToStringOutput(), vmss.ID().ToStringOutput()
	if err := ctx.RegisterResourceOutputs(comp, pulumi.Map{"endpoint": comp.Endpoint}); err != nil {
		return nil, err
	}
	return comp, nil
}
