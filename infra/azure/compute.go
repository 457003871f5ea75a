package azure

import (
	"fmt"

	"github.com/pulumi/pulumi-azure-native-sdk/compute/v2"
	"github.com/pulumi/pulumi/sdk/v3/go/pulumi"

	"github.com/clusterforge/clusterforge/components/spec"
	"github.com/clusterforge/clusterforge/components/wellknown"
)

// Login is how every machine is reached for break-glass access (from the hub only).
type Login struct {
	AdminUsername string
	SSHPublicKey  pulumi.StringInput
}

func (l Login) linux() *compute.LinuxConfigurationArgs {
	return &compute.LinuxConfigurationArgs{
		DisablePasswordAuthentication: pulumi.Bool(true),
		Ssh: &compute.SshConfigurationArgs{PublicKeys: compute.SshPublicKeyTypeArray{compute.SshPublicKeyTypeArgs{
			Path:    pulumi.String(fmt.Sprintf("/home/%s/.ssh/authorized_keys", l.AdminUsername)),
			KeyData: l.SSHPublicKey,
		}}},
	}
}

// ScaleSetSpec is what one VMSS needs beyond the cluster spec.
type ScaleSetSpec struct {
	Cluster  *spec.Cluster
	Role     string
	Name     string
	VMSize   string
	ImageID  string
	Capacity int
	// IPConfigurations is the number of NIC IP configurations: the primary plus one per pod (L29).
	IPConfigurations int
	// SinglePlacementGroup keeps the scale set in one placement group (at most 100 instances):
	// InfiniBand reaches only within one.
	SinglePlacementGroup bool
	// Zones the scale set spreads over. Default: the cluster's.
	Zones []string
	// NodeTemplateTags, for worker pools, carry the placement labels the CSR approver gives their
	// nodes (machine.NodeTemplateTags).
	NodeTemplateTags map[string]string
	// NodeGroupID, for worker pools, is the VNet's nodes group, which the primary IP configuration
	// (the node's address) joins; its pods' join none.
	NodeGroupID pulumi.StringInput
	// Repairs, for the apiservers alone, makes Azure reimage an instance whose Application Health
	// extension finds its apiserver dead (spec.APIServerRepairProbePath); etcd members are VMs,
	// never repaired.
	Repairs           bool
	SubnetID          pulumi.StringInput
	BackendPoolIDs    []pulumi.StringInput
	IdentityID        pulumi.StringInput
	CustomData        pulumi.StringInput
	Login             Login
	ResourceGroupName pulumi.StringInput
}

// ScaleSetArgs maps a ScaleSetSpec to azure-native arguments: a Uniform scale set spread over the
// zones with singlePlacementGroup off (up to 1,000 instances) unless InfiniBand needs one, no overprovisioning (every
// instance that boots joins, L11) and manual upgrades (nodes are semi-stateful, L18). Sizes with
// a local disk boot an ephemeral OS disk placed on it.
func ScaleSetArgs(s ScaleSetSpec) *compute.VirtualMachineScaleSetArgs {
	c := s.Cluster
	var ipConfigs compute.VirtualMachineScaleSetIPConfigurationArray
	for i := range s.IPConfigurations {
		cfg := compute.VirtualMachineScaleSetIPConfigurationArgs{
			Name:    pulumi.String(fmt.Sprintf("ipconfig%d", i+1)),
			Primary: pulumi.Bool(i == 0),
			Subnet:  &compute.ApiEntityReferenceArgs{Id: s.SubnetID},
		}
		if i == 0 && s.NodeGroupID != nil {
			cfg.ApplicationSecurityGroups = compute.SubResourceArray{compute.SubResourceArgs{Id: s.NodeGroupID}}
		}
		if i == 0 && len(s.BackendPoolIDs) > 0 {
			var pools compute.SubResourceArray
			for _, id := range s.BackendPoolIDs {
				pools = append(pools, compute.SubResourceArgs{Id: id})
			}
			cfg.LoadBalancerBackendAddressPools = pools
		}
		ipConfigs = append(ipConfigs, cfg)
	}
	zones := s.Zones
	if zones == nil {
		zones = c.Zones
	}
	network := &compute.VirtualMachineScaleSetNetworkProfileArgs{
		NetworkInterfaceConfigurations: compute.VirtualMachineScaleSetNetworkConfigurationArray{
			compute.VirtualMachineScaleSetNetworkConfigurationArgs{
				Name:                        pulumi.String("nic"),
				Primary:                     pulumi.Bool(true),
				EnableAcceleratedNetworking: pulumi.Bool(true),
				IpConfigurations:            ipConfigs,
			},
		},
	}
	var repairs *compute.AutomaticRepairsPolicyArgs
	var extensions *compute.VirtualMachineScaleSetExtensionProfileArgs
	if s.Repairs {
		repairs = &compute.AutomaticRepairsPolicyArgs{Enabled: pulumi.Bool(true),
			GracePeriod: pulumi.String(spec.APIServerRepairGracePeriod), RepairAction: pulumi.String(spec.APIServerRepairAction)}
		extensions = &compute.VirtualMachineScaleSetExtensionProfileArgs{Extensions: compute.VirtualMachineScaleSetExtensionTypeArray{
			APIServerHealthExtension()}}
	}
	return &compute.VirtualMachineScaleSetArgs{
		ResourceGroupName:        s.ResourceGroupName,
		Location:                 pulumi.String(c.Location),
		VmScaleSetName:           pulumi.String(s.Name),
		Tags:                     scaleSetTags(c, s),
		Zones:                    pulumi.ToStringArray(zones),
		OrchestrationMode:        pulumi.String("Uniform"),
		SinglePlacementGroup:     pulumi.Bool(s.SinglePlacementGroup),
		Overprovision:            pulumi.Bool(false),
		PlatformFaultDomainCount: pulumi.Int(1),
		UpgradePolicy:            &compute.UpgradePolicyArgs{Mode: compute.UpgradeModeManual},
		AutomaticRepairsPolicy:   repairs,
		Sku: &compute.SkuArgs{
			Name: pulumi.String(s.VMSize), Tier: pulumi.String("Standard"), Capacity: pulumi.Float64(float64(s.Capacity)),
		},
		Identity: &compute.VirtualMachineScaleSetIdentityArgs{
			Type:                   compute.ResourceIdentityTypeUserAssigned,
			UserAssignedIdentities: pulumi.StringArray{s.IdentityID},
		},
		VirtualMachineProfile: &compute.VirtualMachineScaleSetVMProfileArgs{
			OsProfile: &compute.VirtualMachineScaleSetOSProfileArgs{
				ComputerNamePrefix: pulumi.String(s.Name),
				AdminUsername:      pulumi.String(s.Login.AdminUsername),
				CustomData:         s.CustomData,
				LinuxConfiguration: s.Login.linux(),
			},
			StorageProfile: &compute.VirtualMachineScaleSetStorageProfileArgs{
				ImageReference: &compute.ImageReferenceArgs{Id: pulumi.String(s.ImageID)},
				OsDisk:         scaleSetOSDisk(s.VMSize),
			},
			NetworkProfile:   network,
			ExtensionProfile: extensions,
		},
	}
}

// The Application Health extension on the apiserver scale set: version 1.0 reports binary health
// states, a 200 healthy and anything else unhealthy. 2.0 (rich states) wants a JSON body /livez
// does not give, and would call every apiserver Unknown, which repairs too.
const (
	HealthExtensionPublisher = "Microsoft.ManagedServices"
	HealthExtensionType      = "ApplicationHealthLinux"
	HealthExtensionVersion   = "1.0"
)

// APIServerHealthExtension is the Application Health extension automatic repairs judge the
// apiservers by: each probes its own apiserver's liveness (spec.APIServerRepairProbePath).
func APIServerHealthExtension() compute.VirtualMachineScaleSetExtensionTypeArgs {
	return compute.VirtualMachineScaleSetExtensionTypeArgs{
		Name: pulumi.String("health"), Publisher: pulumi.String(HealthExtensionPublisher), Type: pulumi.String(HealthExtensionType),
		TypeHandlerVersion: pulumi.String(HealthExtensionVersion), AutoUpgradeMinorVersion: pulumi.Bool(true),
		Settings: pulumi.Map{
			"protocol": pulumi.String("https"), "port": pulumi.Int(wellknown.APIServerPort), "requestPath": pulumi.String(spec.APIServerRepairProbePath),
			"intervalInSeconds": pulumi.Int(spec.APIServerProbeIntervalSeconds), "numberOfProbes": pulumi.Int(spec.APIServerProbeFailures),
		},
	}
}

func scaleSetOSDisk(vmSize string) *compute.VirtualMachineScaleSetOSDiskArgs {
	if spec.HasLocalDisk(vmSize) {
		return &compute.VirtualMachineScaleSetOSDiskArgs{
			CreateOption:     pulumi.String("FromImage"),
			Caching:          compute.CachingTypesReadOnly,
			DiffDiskSettings: &compute.DiffDiskSettingsArgs{Option: pulumi.String("Local"), Placement: pulumi.String("ResourceDisk")},
		}
	}
	return &compute.VirtualMachineScaleSetOSDiskArgs{
		CreateOption: pulumi.String("FromImage"),
		Caching:      compute.CachingTypesReadWrite,
		ManagedDisk:  &compute.VirtualMachineScaleSetManagedDiskParametersArgs{StorageAccountType: pulumi.String("Premium_LRS")},
	}
}

// scaleSetTags are a scale set's tags: its cluster and role, and its nodes' placement labels.
func scaleSetTags(c *spec.Cluster, s ScaleSetSpec) pulumi.StringMap {
	t := tags(c, s.Role)
	for k, v := range s.NodeTemplateTags {
		t[k] = pulumi.String(v)
	}
	return t
}
