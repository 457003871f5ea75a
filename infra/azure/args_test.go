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
		Pools: []spec.Pool{{Name: "cpu", VMSize: "Standard_D4ds_v5", Nodes: 3, System: true}, {Name: "cpu2", VMSize: "Standard_D4ds_v5", Nodes: 1}}}
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
// decided as the policy intends. A group reaches no further than its VNet: a node of the other
// worker VNet comes as an address only.
func TestInboundRules(t *testing.T) {
	c := testCluster(t)
	c.Pools = append(c.Pools, spec.Pool{Name: "gpu", VMSize: "Standard_NC4as_T4_v3", Nodes: 1, MaxNodes: 1, MaxPods: 30})
	c.Pools[1].VNets = []string{"10.9.0.0/16", "10.10.0.0/16"} // a shrunk pool keeps its second VNet
	n, workers := c.Network, c.WorkerVNets()
	at := func(cidr string, i int) string { return addr(t, cidr, i) }
	hub, cp, etcd := at(n.Hub.AddressSpace, 7), at(n.ControlPlaneSubnet, 5), at(n.EtcdSubnet, 11)
	api, kubelet, ssh := strconv.Itoa(wellknown.APIServerPort), strconv.Itoa(wellknown.KubeletPort), strconv.Itoa(wellknown.SSHPort)
	anyPod := at(workers[1].Prefix, 9)
	flows := []flow{
		{SubnetControlPlane, hub, "", "", api, true},
		{SubnetControlPlane, at(workers[0].Prefix, 6), "", "", api, true},
		{SubnetControlPlane, anyPod, "", "", api, true},
		{SubnetControlPlane, etcd, "", "", api, false},
		{SubnetControlPlane, "AzureLoadBalancer", "", "", api, true},
		{SubnetControlPlane, hub, "", "", ssh, true},
		{SubnetControlPlane, anyPod, "", "", ssh, false},
		{SubnetControlPlane, anyPod, "", "", strconv.Itoa(wellknown.ControllerManagerPort), false},
		{SubnetControlPlane, anyPod, "", "", strconv.Itoa(wellknown.CertificateMetricsPort), true},
		{SubnetControlPlane, etcd, "", "", strconv.Itoa(wellknown.CertificateMetricsPort), false},
		{SubnetEtcd, cp, "", "", "2379", true},
		{SubnetEtcd, cp, "", "", "2381", false},
		{SubnetEtcd, etcd, "", "", "2380", true},
		{SubnetEtcd, anyPod, "", "", "2381", true},
		{SubnetEtcd, anyPod, "", "", "2379", false},
		{SubnetEtcd, hub, "", "", "2379", false},
		{SubnetEtcd, hub, "", "", ssh, true},
	}
	for _, w := range workers {
		// The first VNet of another pool, and the pool's own other VNet if it has one.
		other := workers[slices.IndexFunc(workers, func(o spec.WorkerVNet) bool { return o.Pool.Name != w.Pool.Name })]
		node, pod := at(w.Prefix, 6), at(w.Prefix, 9)
		otherNode, otherPod := at(other.Prefix, 6), at(other.Prefix, 9)
		if i := slices.IndexFunc(workers, func(o spec.WorkerVNet) bool { return o.Pool.Name == w.Pool.Name && o.Prefix != w.Prefix }); i >= 0 {
			poolNode, poolPod := at(workers[i].Prefix, 6), at(workers[i].Prefix, 9)
			flows = append(flows,
				// A training gang spans its pool's VNets by pod IP (L33); no node port opens for it.
				flow{w.Name, poolPod, "", "", "29500", true},
				flow{w.Name, poolNode, "", GroupNodes, "29500", false},
				flow{w.Name, poolPod, "", GroupNodes, "22", false},
				flow{w.Name, poolNode, "", GroupNodes, kubelet, false})
		}
		flows = append(flows,
			flow{w.Name, cp, "", GroupNodes, kubelet, true},
			flow{w.Name, pod, "", GroupNodes, kubelet, false},
			flow{w.Name, node, GroupNodes, GroupNodes, kubelet, false},
			flow{w.Name, otherNode, "", GroupNodes, kubelet, false},
			flow{w.Name, hub, "", GroupNodes, kubelet, false},
			flow{w.Name, node, GroupNodes, GroupNodes, "29500", false},
			flow{w.Name, otherNode, "", GroupNodes, "29500", false},
			flow{w.Name, otherPod, "", GroupNodes, ssh, false},
			flow{w.Name, otherPod, "", GroupNodes, strconv.Itoa(wellknown.NodeExporterPort), true},
			flow{w.Name, otherPod, "", "", "8080", true},
			flow{w.Name, pod, "", GroupNodes, strconv.Itoa(wellknown.NodeExporterPort), true},
			flow{w.Name, pod, "", GroupNodes, strconv.Itoa(wellknown.TrafficMetricsPort), true},
			flow{w.Name, hub, "", GroupNodes, strconv.Itoa(wellknown.TrafficMetricsPort), false},
			flow{w.Name, hub, "", GroupNodes, ssh, true},
			flow{w.Name, pod, "", GroupNodes, ssh, false},
			flow{w.Name, pod, "", GroupNodes, "30000", false},
			flow{w.Name, cp, "", GroupNodes, "30000", false},
			flow{w.Name, cp, "", "", "8443", true},
			flow{w.Name, pod, "", "", "8080", true},
			flow{w.Name, node, GroupNodes, "", "8080", true},
			flow{w.Name, hub, "", "", "8888", true},
			flow{w.Name, etcd, "", "", "8080", false},
		)
	}
	vnet := []netip.Prefix{netip.MustParsePrefix(n.AddressSpace), netip.MustParsePrefix(n.Hub.AddressSpace)}
	for _, w := range workers {
		vnet = append(vnet, netip.MustParsePrefix(w.Prefix))
	}
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

// TestNodesGroupHoldsFourThousandIPConfigurations: a VNet's nodes group holds its nodes' primary
// IP configurations, which Azure caps at 4,000: a pool past that takes another VNet.
func TestNodesGroupHoldsFourThousandIPConfigurations(t *testing.T) {
	for step, vnets := range []int{1, 2} {
		c := testCluster(t)
		c.Pools[0].VMSize, c.Pools[0].MaxPods = "Standard_ND96isr_H100_v5", 10 // 40 scale sets of 100 fit 4,000
		c.Pools[0].MaxNodes = int(spec.LimitIPConfigsPerASG.Value) + step
		c.TargetNodes = c.Pools[0].MaxNodes
		c.Default()
		for _, u := range LimitUses(c) {
			if u.Limit == &spec.LimitIPConfigsPerASG && (u.Over() || step == 0 && u.Use != spec.LimitIPConfigsPerASG.Value || len(c.Pools[0].VNets) != vnets) {
				t.Errorf("%d nodes: VNets %v, largest nodes group %d of %d", c.TargetNodes, c.Pools[0].VNets, u.Use, u.Limit.Value)
			}
		}
	}
}
