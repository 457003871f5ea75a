package azure

import (
	"fmt"
	"strings"

	"github.com/pulumi/pulumi-azure-native-sdk/compute/v2"
	"github.com/pulumi/pulumi-azure-native-sdk/network/v2"
	"github.com/pulumi/pulumi/sdk/v3/go/pulumi"

	"github.com/clusterforge/clusterforge/components/spec"
)

// Component types, which URNs spell.
const (
	ClusterType     = "clusterforge:azure:Cluster"
	EtcdClusterType = "clusterforge:azure:EtcdCluster"
)

// EtcdClusterArgs configures NewEtcdCluster.
type EtcdClusterArgs struct {
	Cluster           *spec.Cluster
	Etcd              spec.EtcdCluster
	ResourceGroupName pulumi.StringInput
	SubnetID          pulumi.StringInput
	IdentityID        pulumi.StringInput
	CustomData        pulumi.StringInput
	Login             Login
	// Replacing is the member whose VM a roll is replacing in this run, if any.
	Replacing string
}

// memberVMImmutable are the VM properties Azure cannot change in place on a running member
// (pulumi-azure-native#1117) or changes by wiping its local disk (a resize): only a roll,
// which replaces one member at a time, applies them.
var memberVMImmutable = []string{"osProfile.customData", "storageProfile.imageReference", "hardwareProfile.vmSize"}

// memberVMOptions protect every member's VM, its data's only home besides the backups (L02),
// except the one a roll is replacing. A member's VM has a fixed name, so its replacement can
// only be created once it is deleted.
func memberVMOptions(a *EtcdClusterArgs, m spec.Member) []pulumi.ResourceOption {
	if m.Name == a.Replacing {
		return []pulumi.ResourceOption{pulumi.DeleteBeforeReplace(true)}
	}
	return []pulumi.ResourceOption{pulumi.DeleteBeforeReplace(true), pulumi.Protect(true), pulumi.IgnoreChanges(memberVMImmutable)}
}

// EtcdMemberVMName is the Pulumi name of a member's VM under the EtcdCluster component named
// component: "<component>-<role>-<i>", e.g. cf-dev-etcd-main-etcd-main-0.
func EtcdMemberVMName(c *spec.Cluster, component string, m spec.Member) string {
	return component + "-" + strings.TrimPrefix(m.Name, c.Name+"-")
}

// EtcdMemberVMURN is the URN of a member's VM in a stack of the project, which a roll targets.
func EtcdMemberVMURN(stack, project string, c *spec.Cluster, role string, m spec.Member) string {
	component := c.Name + "-" + role
	return fmt.Sprintf("urn:pulumi:%s::%s::%s$%s$%s::%s", stack, project, ClusterType, EtcdClusterType, "azure-native:compute:VirtualMachine",
		EtcdMemberVMName(c, component, m))
}

// EtcdCluster is one etcd cluster of dedicated VMs (L01) with stable identities: a static private
// IP and a fixed name per member, spread over the zones. The data dir lives on the VM's local
// disk (L02), which the boot logic formats and mounts.
type EtcdCluster struct {
	pulumi.ResourceState

	ClientURLs pulumi.StringArrayOutput
}

// EtcdNICArgs is a member's NIC with its static address.
func EtcdNICArgs(a *EtcdClusterArgs, m spec.Member) *network.NetworkInterfaceArgs {
	return &network.NetworkInterfaceArgs{
		ResourceGroupName: a.ResourceGroupName, Location: pulumi.String(a.Cluster.Location),
		NetworkInterfaceName: pulumi.String(m.Name + "-nic"), Tags: tags(a.Cluster, a.Etcd.Role),
		EnableAcceleratedNetworking: pulumi.Bool(true),
		IpConfigurations: network.NetworkInterfaceIPConfigurationArray{network.NetworkInterfaceIPConfigurationArgs{
			Name: pulumi.String("ipconfig1"), Primary: pulumi.Bool(true),
			PrivateIPAllocationMethod: pulumi.String("Static"), PrivateIPAddress: pulumi.String(m.IP),
			Subnet: &network.SubnetTypeArgs{Id: a.SubnetID},
		}},
	}
}

// EtcdVMArgs is a member's VM: its zone, a size with a local disk, and the role's user-data.
func EtcdVMArgs(a *EtcdClusterArgs, m spec.Member, nicID pulumi.StringInput) *compute.VirtualMachineArgs {
	c := a.Cluster
	return &compute.VirtualMachineArgs{
		ResourceGroupName: a.ResourceGroupName, Location: pulumi.String(c.Location),
		VmName: pulumi.String(m.Name), Zones: pulumi.ToStringArray([]string{m.Zone}), Tags: tags(c, a.Etcd.Role),
		HardwareProfile: &compute.HardwareProfileArgs{VmSize: pulumi.String(a.Etcd.Spec.VMSize)},
		Identity: &compute.VirtualMachineIdentityArgs{
			Type: compute.ResourceIdentityTypeUserAssigned, UserAssignedIdentities: pulumi.StringArray{a.IdentityID},
		},
		OsProfile: &compute.OSProfileArgs{
			ComputerName: pulumi.String(m.Name), AdminUsername: pulumi.String(a.Login.AdminUsername),
			CustomData: a.CustomData, LinuxConfiguration: a.Login.linux(),
		},
		StorageProfile: &compute.StorageProfileArgs{
			ImageReference: &compute.ImageReferenceArgs{Id: pulumi.String(c.ControlPlaneImage)},
			OsDisk: &compute.OSDiskArgs{
				// A roll replaces the VM: its OS disk goes with it rather than lingering.
				CreateOption: pulumi.String("FromImage"), Caching: compute.CachingTypesReadWrite, DeleteOption: pulumi.String("Delete"),
				ManagedDisk: &compute.ManagedDiskParametersArgs{StorageAccountType: pulumi.String("Premium_LRS")},
			},
		},
		NetworkProfile: &compute.NetworkProfileArgs{NetworkInterfaces: compute.NetworkInterfaceReferenceArray{
			compute.NetworkInterfaceReferenceArgs{Id: nicID, Primary: pulumi.Bool(true)},
		}},
	}
}

// NewEtcdCluster builds the members of one etcd cluster.
func NewEtcdCluster(ctx *pulumi.Context, name string, args *EtcdClusterArgs, opts ...pulumi.ResourceOption) (*EtcdCluster, error) {
	comp := &EtcdCluster{}
	if err := ctx.RegisterComponentResource(EtcdClusterType, name, comp, opts...); err != nil {
		return nil, err
	}
	parent := pulumi.Parent(comp)
	for _, m := range args.Etcd.Members {
		vmName := EtcdMemberVMName(args.Cluster, name, m)
		// The NIC holds the member's static address, its identity in the cluster: never replaced.
		nic, err := network.NewNetworkInterface(ctx, vmName+"-nic", EtcdNICArgs(args, m), parent, pulumi.Protect(true))
		if err != nil {
			return nil, err
		}
		opts := append([]pulumi.ResourceOption{parent}, memberVMOptions(args, m)...)
		if _, err := compute.NewVirtualMachine(ctx, vmName, EtcdVMArgs(args, m, nic.ID()), opts...); err != nil {
			return nil, err
		}
	}
	comp.ClientURLs = pulumi.ToStringArray(args.Etcd.ClientURLs()).ToStringArrayOutput()
	if err := ctx.RegisterResourceOutputs(comp, pulumi.Map{"clientURLs": comp.ClientURLs}); err != nil {
		return nil, err
	}
	return comp, nil
}
