package azure

import (
	"testing"

	"github.com/pulumi/pulumi-azure-native-sdk/compute/v2"
	"github.com/pulumi/pulumi-azure-native-sdk/network/v2"
	"github.com/pulumi/pulumi/sdk/v3/go/pulumi"

	"github.com/clusterforge/clusterforge/components/spec"
)

func testCluster(t *testing.T) *spec.Cluster {
	t.Helper()
	c := &spec.Cluster{Name: "cf-test", Network: spec.Network{Hub: spec.Hub{
		VNetID: "/subscriptions/00000000-0000-0000-0000-000000000001/resourceGroups/hub/providers/Microsoft.Network/virtualNetworks/hub", AddressSpace: "10.255.0.0/16"}},
		Pools: []spec.Pool{{Name: "cpu", VMSize: "Standard_D4ds_v5", Nodes: 3}}}
	c.Default()
	if err := c.Validate(); err != nil {
		t.Fatal(err)
	}
	return c
}

func TestScaleSetArgs(t *testing.T) {
	c := testCluster(t)
	for _, tc := range []struct {
		size      string
		ipConfigs int
		ephemeral bool
	}{
		{"Standard_D16ds_v5", 31, true},
		{"Standard_ND96asr_v4", 31, true},
		{"Standard_E32s_v5", 1, false},
	} {
		args := ScaleSetArgs(ScaleSetSpec{Cluster: c, Role: "r", Name: "n", VMSize: tc.size, ImageID: "img", Capacity: 7,
			IPConfigurations: tc.ipConfigs, SubnetID: pulumi.String("subnet"), IdentityID: pulumi.String("id"),
			CustomData: pulumi.String("data"), Login: Login{AdminUsername: "a", SSHPublicKey: pulumi.String("k")}, ResourceGroupName: pulumi.String("rg")})
		sku := args.Sku.(*compute.SkuArgs)
		if sku.Capacity != pulumi.Float64(7) || sku.Name != pulumi.String(tc.size) {
			t.Errorf("%s: sku %+v", tc.size, sku)
		}
		if args.SinglePlacementGroup != pulumi.Bool(false) || args.Overprovision != pulumi.Bool(false) {
			t.Errorf("%s: placement group or overprovisioning on", tc.size)
		}
		profile := args.VirtualMachineProfile.(*compute.VirtualMachineScaleSetVMProfileArgs)
		nic := profile.NetworkProfile.(*compute.VirtualMachineScaleSetNetworkProfileArgs).NetworkInterfaceConfigurations.(compute.VirtualMachineScaleSetNetworkConfigurationArray)[0].(compute.VirtualMachineScaleSetNetworkConfigurationArgs)
		if n := len(nic.IpConfigurations.(compute.VirtualMachineScaleSetIPConfigurationArray)); n != tc.ipConfigs {
			t.Errorf("%s: %d IP configurations, want %d", tc.size, n, tc.ipConfigs)
		}
		disk := profile.StorageProfile.(*compute.VirtualMachineScaleSetStorageProfileArgs).OsDisk.(*compute.VirtualMachineScaleSetOSDiskArgs)
		if got := disk.DiffDiskSettings != nil; got != tc.ephemeral {
			t.Errorf("%s: ephemeral OS disk %v, want %v", tc.size, got, tc.ephemeral)
		}
	}
}

func TestEtcdVMArgs(t *testing.T) {
	c := testCluster(t)
	e := c.EtcdClusters()[0]
	a := &EtcdClusterArgs{Cluster: c, Etcd: e, ResourceGroupName: pulumi.String("rg"), SubnetID: pulumi.String("s"),
		IdentityID: pulumi.String("id"), CustomData: pulumi.String("d"), Login: Login{AdminUsername: "a", SSHPublicKey: pulumi.String("k")}}
	for i, m := range e.Members {
		vm := EtcdVMArgs(a, m, pulumi.String("nic"))
		if vm.VmName != pulumi.String(m.Name) || vm.Zones.(pulumi.StringArray)[0] != pulumi.String(c.Zones[i%3]) {
			t.Errorf("member %d: name %v zones %v", i, vm.VmName, vm.Zones)
		}
		ip := EtcdNICArgs(a, m).IpConfigurations.(network.NetworkInterfaceIPConfigurationArray)[0].(network.NetworkInterfaceIPConfigurationArgs)
		if ip.PrivateIPAddress != pulumi.String(m.IP) || ip.PrivateIPAllocationMethod != pulumi.String("Static") {
			t.Errorf("member %d: address %v (%v), want static %s", i, ip.PrivateIPAddress, ip.PrivateIPAllocationMethod, m.IP)
		}
	}
}

func TestGrantsAreLeastPrivilege(t *testing.T) {
	c := testCluster(t)
	if g := Grants(c, spec.RoleEtcdMain); len(g) != 0 {
		t.Errorf("etcd gets %v", g)
	}
	for _, p := range c.Pools {
		g := Grants(c, spec.WorkerRole(p.Name))
		autoscaler := p.Name == c.SystemPool().Name // cluster-autoscaler runs there (L19)
		if g[0].Role != RoleReader || (len(g) == 2) != autoscaler || (autoscaler && g[1].Role != RoleVirtualMachineContributor) {
			t.Errorf("pool %s gets %v, want Reader, and VM Contributor only where the autoscaler runs", p.Name, g)
		}
	}
	for _, g := range Grants(c, spec.RoleAPIServer) {
		if g.Role != RoleVirtualMachineContributor && g.Role != RoleNetworkContributor {
			t.Errorf("apiserver gets %v", g)
		}
	}
}

func TestInboundRulesEndInDeny(t *testing.T) {
	for subnet, rules := range InboundRules(testCluster(t)) {
		last := rules[len(rules)-1]
		if last.Access != "Deny" || last.Sources[0] != "VirtualNetwork" {
			t.Errorf("%s: last rule %+v, want deny-other-vnet", subnet, last)
		}
		for _, r := range rules[:len(rules)-1] {
			if r.Priority >= last.Priority {
				t.Errorf("%s: %s sorts after the deny rule", subnet, r.Name)
			}
		}
	}
}
