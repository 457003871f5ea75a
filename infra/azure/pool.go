package azure

import (
	"fmt"
	"strings"

	"github.com/pulumi/pulumi-azure-native-sdk/compute/v2"
	"github.com/pulumi/pulumi/sdk/v3/go/pulumi"

	"github.com/clusterforge/clusterforge/components/machine"
	"github.com/clusterforge/clusterforge/components/spec"
)

// WorkerPoolArgs configures NewWorkerPool.
type WorkerPoolArgs struct {
	Cluster *spec.Cluster
	Pool    spec.Pool
	// Model, when set, is the spec the scale sets' model (size, image, pod addresses) is rendered
	// from, as CustomData is: the applied spec while a roll holds the pool's model back. It has
	// the pool.
	Model             *spec.Cluster
	ResourceGroupName pulumi.StringInput
	// Network holds each scale set's worker VNet: its subnet and nodes group.
	Network    *Network
	IdentityID pulumi.StringInput
	CustomData pulumi.StringInput
	Login      Login
}

// WorkerPool is one pool's scale sets (more than one when the pool exceeds what a VMSS holds).
// Every NIC carries one secondary IP configuration per pod, so pods get VNet addresses with no
// overlay (Azure CNI, L29).
type WorkerPool struct {
	pulumi.ResourceState

	ScaleSets pulumi.StringArrayOutput
	MaxNodes  pulumi.IntOutput
	// ScaleSetIDs are the scale sets' resource ids, the scopes of the autoscaler's grants.
	ScaleSetIDs []pulumi.StringInput
}

// NewWorkerPool builds the pool's scale sets. After creation the autoscaler owns their capacity (L19).
func NewWorkerPool(ctx *pulumi.Context, name string, args *WorkerPoolArgs, opts ...pulumi.ResourceOption) (*WorkerPool, error) {
	comp := &WorkerPool{}
	if err := ctx.RegisterComponentResource("clusterforge:azure:WorkerPool", name, comp, opts...); err != nil {
		return nil, err
	}
	c, parent := args.Cluster, pulumi.Parent(comp)
	model, pool := c, args.Pool
	if args.Model != nil {
		model = args.Model
		pool, _ = model.PoolOfRole(spec.WorkerRole(args.Pool.Name))
	}
	role := spec.WorkerRole(args.Pool.Name)
	var names []string
	for _, set := range c.ScaleSets() {
		if set.Pool.Name != args.Pool.Name {
			continue
		}
		modelled := set // tagged as the model renders it, held back while a roll runs
		modelled.Pool = pool
		templateTags := machine.NodeTemplateTags(modelled)
		if err := checkTemplateTags(c, role, templateTags); err != nil {
			return nil, fmt.Errorf("pool %s: %w", args.Pool.Name, err)
		}
		vmss := set.AzureName
		vnet, ok := c.VNetOf(set)
		if !ok {
			return nil, fmt.Errorf("scale set %s: pool %s has no worker VNet %d (Validate refuses this)", vmss, set.Pool.Name, set.VNet)
		}
		ss, err := compute.NewVirtualMachineScaleSet(ctx, name+"-"+set.Name, ScaleSetArgs(ScaleSetSpec{
			Cluster: c, Role: role, Name: vmss, VMSize: pool.VMSize, ImageID: pool.Image,
			Capacity: set.Nodes, NodeTemplateTags: templateTags, IPConfigurations: pool.MaxPods + 1, SinglePlacementGroup: set.SinglePlacementGroup, Zones: set.Zones,
			NodeGroupID: args.Network.NodeGroupIDs[vnet.Name], SubnetID: args.Network.WorkerSubnetIDs[vnet.Name],
			IdentityID: args.IdentityID, CustomData: args.CustomData, Login: args.Login, ResourceGroupName: args.ResourceGroupName,
		}), parent, pulumi.IgnoreChanges([]string{"sku.capacity"}))
		if err != nil {
			return nil, err
		}
		names = append(names, vmss)
		comp.ScaleSetIDs = append(comp.ScaleSetIDs, ss.ID().ToStringOutput())
	}
	comp.ScaleSets = pulumi.ToStringArray(names).ToStringArrayOutput()
	comp.MaxNodes = pulumi.Int(args.Pool.MaxNodes).ToIntOutput()
	if err := ctx.RegisterResourceOutputs(comp, pulumi.Map{"scaleSets": comp.ScaleSets, "maxNodes": comp.MaxNodes}); err != nil {
		return nil, err
	}
	return comp, nil
}

// checkTemplateTags refuses node-template tags Azure cannot hold beside clusterforge's own.
func checkTemplateTags(c *spec.Cluster, role string, templateTags map[string]string) error {
	if n := len(templateTags) + len(tags(c, role)); n > spec.MaxResourceTags {
		return fmt.Errorf("its scale sets would carry %d tags (a node-template tag for each label, taint and GPU of its nodes, and %d of clusterforge's), and Azure takes %d a resource: give the pool fewer labels or taints",
			n, len(tags(c, role)), spec.MaxResourceTags)
	}
	// Azure's tag names ignore case; Kubernetes' label and taint keys do not.
	seen := map[string]string{}
	for name := range templateTags {
		if other, ok := seen[strings.ToLower(name)]; ok {
			return fmt.Errorf("its labels or taints %q and %q differ only in case, and Azure's tag names do not tell them apart: rename one", other, name)
		}
		seen[strings.ToLower(name)] = name
	}
	return nil
}
