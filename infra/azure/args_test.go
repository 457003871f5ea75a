package azure

import (
	"net/netip"
	"slices"
	"strconv"
	"testing"

	"github.com/pulumi/pulumi-azure-native-sdk/compute/v2"
	"github.com/pulumi/pulumi-azure-native-sdk/network/v2"
	"github.com/pulumi/pulumi/sdk/v3/go/pulumi"

	"github.com/clusterforge/clusterforge/components/spec"
	"github.com/clusterforge/clusterforge/components/wellknown"
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

// flow is one inbound connection attempt, judged as Azure judges it: rules in priority order,
// the first whose source, destination group, protocol and port match decides.
type flow struct {
	subnet string
	source string // an address, or the AzureLoadBalancer tag
	group  string // the source's application security group, if it is a node or a pod
	dest   string // the destination's group in the node subnet
	port   string
	allow  bool
}

func (f flow) decide(rules []Rule, vnet []netip.Prefix) (Rule, bool) {
	sorted := slices.Clone(rules)
	slices.SortFunc(sorted, func(a, b Rule) int { return a.Priority - b.Priority })
	for _, r := range sorted {
		source := slices.Contains(r.SourceGroups, f.group)
		for _, s := range r.Sources {
			switch s {
			case "AzureLoadBalancer":
				source = source || f.source == s
			case "VirtualNetwork":
				source = source || slices.ContainsFunc(vnet, func(p netip.Prefix) bool {
					return f.source != "AzureLoadBalancer" && p.Contains(netip.MustParseAddr(f.source))
				})
			default:
				source = source || f.source != "AzureLoadBalancer" && netip.MustParsePrefix(s).Contains(netip.MustParseAddr(f.source))
			}
		}
		dest := len(r.DestinationGroups) == 0 || slices.Contains(r.DestinationGroups, f.dest)
		port := slices.Contains(r.Ports, "*") || slices.Contains(r.Ports, f.port)
		if source && dest && port {
			return r, r.Access == "Allow"
		}
	}
	return Rule{Name: "Azure default"}, false
}

// Every rule row decides at least one flow of this table, allow rules included, and every flow is
// decided as the policy intends.
func TestInboundRules(t *testing.T) {
	c := testCluster(t)
	n := c.Network
	at := func(cidr string, i int) string { return addr(t, cidr, i) }
	hub, cp, etcd, node, pod := at(n.Hub.AddressSpace, 7), at(n.ControlPlaneSubnet, 5), at(n.EtcdSubnet, 11), at(n.NodeSubnet, 6), at(n.NodeSubnet, 9)
	api, kubelet, ssh := strconv.Itoa(wellknown.APIServerPort), strconv.Itoa(wellknown.KubeletPort), strconv.Itoa(wellknown.SSHPort)
	flows := []flow{
		{SubnetControlPlane, hub, "", "", api, true},
		{SubnetControlPlane, node, GroupNodes, "", api, true},
		{SubnetControlPlane, pod, GroupPods, "", api, true},
		{SubnetControlPlane, etcd, "", "", api, false},
		{SubnetControlPlane, "AzureLoadBalancer", "", "", api, true},
		{SubnetControlPlane, hub, "", "", ssh, true},
		{SubnetControlPlane, node, GroupNodes, "", ssh, false},
		{SubnetControlPlane, pod, GroupPods, "", strconv.Itoa(wellknown.ControllerManagerPort), false},
		{SubnetControlPlane, pod, GroupPods, "", strconv.Itoa(wellknown.CertificateMetricsPort), true},
		{SubnetControlPlane, node, GroupNodes, "", strconv.Itoa(wellknown.CertificateMetricsPort), false},
		{SubnetEtcd, cp, "", "", "2379", true},
		{SubnetEtcd, cp, "", "", "2381", false},
		{SubnetEtcd, etcd, "", "", "2380", true},
		{SubnetEtcd, pod, GroupPods, "", "2381", true},
		{SubnetEtcd, pod, GroupPods, "", "2379", false},
		{SubnetEtcd, node, GroupNodes, "", "2381", false},
		{SubnetEtcd, hub, "", "", "2379", false},
		{SubnetEtcd, hub, "", "", ssh, true},
		{SubnetNodes, cp, "", GroupNodes, kubelet, true},
		{SubnetNodes, pod, GroupPods, GroupNodes, kubelet, false},
		{SubnetNodes, hub, "", GroupNodes, kubelet, false},
		{SubnetNodes, etcd, "", GroupNodes, kubelet, false},
		{SubnetNodes, hub, "", GroupNodes, ssh, true},
		{SubnetNodes, pod, GroupPods, GroupNodes, ssh, false},
		{SubnetNodes, cp, "", GroupPods, "8443", true},
		{SubnetNodes, cp, "", GroupNodes, "30000", false},
		{SubnetNodes, pod, GroupPods, GroupPods, "8080", true},
		{SubnetNodes, node, GroupNodes, GroupPods, "8080", true},
		{SubnetNodes, hub, "", GroupPods, "8888", true},
		{SubnetNodes, node, GroupNodes, GroupNodes, "29500", true},
		{SubnetNodes, pod, GroupPods, GroupNodes, strconv.Itoa(wellknown.NodeExporterPort), true},
		{SubnetNodes, pod, GroupPods, GroupNodes, strconv.Itoa(wellknown.TrafficMetricsPort), true},
		{SubnetNodes, hub, "", GroupNodes, strconv.Itoa(wellknown.TrafficMetricsPort), false},
		{SubnetNodes, pod, GroupPods, GroupNodes, "30000", false},
		{SubnetNodes, hub, "", GroupNodes, "30000", false},
	}
	vnet := []netip.Prefix{netip.MustParsePrefix(n.AddressSpace), netip.MustParsePrefix(n.Hub.AddressSpace)}
	all := InboundRules(c)
	deciding := map[string]bool{}
	for _, f := range flows {
		rule, allowed := f.decide(all[f.subnet], vnet)
		deciding[f.subnet+"/"+rule.Name] = true
		if allowed != f.allow {
			t.Errorf("%s subnet, %s (%s) to %s:%s: allowed %v by %s, want %v", f.subnet, f.source, f.group, f.dest, f.port, allowed, rule.Name, f.allow)
		}
	}
	for subnet, rules := range all {
		for _, r := range rules {
			if !deciding[subnet+"/"+r.Name] {
				t.Errorf("%s rule %s decides no flow of the table: add one", subnet, r.Name)
			}
			if r.Consumer == "" {
				t.Errorf("%s rule %s names no consumer", subnet, r.Name)
			}
			if len(r.Sources) > 0 == (len(r.SourceGroups) > 0) {
				t.Errorf("%s rule %s needs exactly one of address sources and source groups", subnet, r.Name)
			}
		}
	}
}

func addr(t *testing.T, cidr string, i int) string {
	t.Helper()
	a := netip.MustParsePrefix(cidr).Addr()
	for range i {
		a = a.Next()
	}
	return a.String()
}

// TestPodsGroupHoldsFourThousandIPConfigurations: every pod's IP configuration joins one
// application security group, which Azure caps at 4,000.
func TestPodsGroupHoldsFourThousandIPConfigurations(t *testing.T) {
	c := testCluster(t)
	c.Kubelet.MaxPods = 30
	for step := range 2 {
		c.TargetNodes = int(spec.LimitIPConfigsPerASG.Value)/30 + step
		for _, u := range LimitUses(c) {
			if u.Limit == &spec.LimitIPConfigsPerASG && (u.Over() != (step == 1) || u.Field != "targetNodes") {
				t.Errorf("%d nodes: %d IP configurations of %d, over %v, field %q", c.TargetNodes, u.Use, u.Limit.Value, u.Over(), u.Field)
			}
		}
	}
}
