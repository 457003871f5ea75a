package azure

import (
	"fmt"
	"strconv"

	"github.com/pulumi/pulumi-azure-native-sdk/network/v2"
	"github.com/pulumi/pulumi/sdk/v3/go/pulumi"

	"github.com/clusterforge/clusterforge/components/spec"
	"github.com/clusterforge/clusterforge/components/wellknown"
)

// Subnet roles of the spoke VNet.
const (
	SubnetControlPlane = "controlplane"
	SubnetEtcd         = "etcd"
	SubnetNodes        = "nodes"
)

// SubnetRoles lists the subnets in creation order.
var SubnetRoles = []string{SubnetControlPlane, SubnetEtcd, SubnetNodes}

// Application security groups split the node subnet by what an address is (Azure CNI gives pods
// addresses of the node subnet, L29): a NIC's primary IP configuration is the node, its
// secondary ones are pods.
const (
	GroupNodes = "nodes"
	GroupPods  = "pods"
)

// Groups lists the application security groups in creation order.
var Groups = []string{GroupNodes, GroupPods}

// Rule is one inbound NSG rule, before it becomes azure-native arguments.
type Rule struct {
	Name     string
	Priority int
	Access   string // Allow or Deny
	Protocol string // Tcp or *
	// Sources are address prefixes or service tags; SourceGroups are application security groups.
	// A rule has one or the other, as Azure requires.
	Sources      []string
	SourceGroups []string
	// DestinationGroups narrows the destination to the nodes or the pods of the subnet; empty is any.
	DestinationGroups []string
	Ports             []string
	// Consumer is the component the rule lets in; a rule without one does not exist.
	Consumer string
}

// denyVNetPriority sits below every allow rule and above Azure's default AllowVnetInBound (65000),
// so only the listed peers reach a subnet.
const denyVNetPriority = 4000

// InboundRules is the least-privilege inbound policy of each subnet, every allow rule named by the
// component it serves; everything else from the VNet and the hub is denied (L31).
func InboundRules(c *spec.Cluster) map[string][]Rule {
	n := c.Network
	hub, cp, etcd, nodes := n.Hub.AddressSpace, n.ControlPlaneSubnet, n.EtcdSubnet, n.NodeSubnet
	port := strconv.Itoa
	all := []string{"*"}
	ssh := Rule{Name: "ssh-from-hub", Priority: 200, Access: "Allow", Protocol: "Tcp", Sources: []string{hub}, Ports: []string{port(wellknown.SSHPort)},
		Consumer: "break-glass SSH from the hub (L31)"}
	deny := Rule{Name: "deny-other-vnet", Priority: denyVNetPriority, Access: "Deny", Protocol: "*", Sources: []string{"VirtualNetwork"}, Ports: all,
		Consumer: "everything not listed above"}
	nodeSSH := ssh
	nodeSSH.DestinationGroups = []string{GroupNodes}
	return map[string][]Rule{
		SubnetControlPlane: {
			{Name: "api-from-clients", Priority: 100, Access: "Allow", Protocol: "Tcp", Sources: []string{hub, nodes, cp}, Ports: []string{port(wellknown.APIServerPort)},
				Consumer: "kube-apiserver: kubelets and pods, operators from the hub, the control plane itself"},
			{Name: "api-probe", Priority: 110, Access: "Allow", Protocol: "Tcp", Sources: []string{"AzureLoadBalancer"}, Ports: []string{port(wellknown.APIServerPort)},
				Consumer: "the load balancer's /readyz probe"},
			{Name: "certificates-from-pods", Priority: 120, Access: "Allow", Protocol: "Tcp", SourceGroups: []string{GroupPods}, Ports: []string{port(wellknown.CertificateMetricsPort)},
				Consumer: "Prometheus reading certificate expiry from clusterforge-csr-approver"},
			ssh, deny,
		},
		SubnetEtcd: {
			{Name: "etcd-client-from-apiservers", Priority: 100, Access: "Allow", Protocol: "Tcp", Sources: []string{cp}, Ports: []string{port(wellknown.EtcdClientPort)},
				Consumer: "kube-apiserver's etcd client"},
			{Name: "etcd-from-peers", Priority: 110, Access: "Allow", Protocol: "Tcp", Sources: []string{etcd}, Ports: []string{port(wellknown.EtcdClientPort), port(wellknown.EtcdPeerPort)},
				Consumer: "etcd peers, and etcd-join.service's member add/remove"},
			{Name: "etcd-metrics-from-pods", Priority: 120, Access: "Allow", Protocol: "Tcp", SourceGroups: []string{GroupPods}, Ports: []string{port(wellknown.EtcdMetricsPort), port(wellknown.EtcdBackupMetricsPort)},
				Consumer: "Prometheus, a pod, scraping etcd's metrics port and the backup agent's (never the client port)"},
			ssh, deny,
		},
		SubnetNodes: {
			{Name: "kubelet-from-apiservers", Priority: 100, Access: "Allow", Protocol: "Tcp", Sources: []string{cp}, DestinationGroups: []string{GroupNodes}, Ports: []string{port(wellknown.KubeletPort)},
				Consumer: "kube-apiserver: logs, exec, port-forward"},
			{Name: "pods-from-control-plane", Priority: 110, Access: "Allow", Protocol: "Tcp", Sources: []string{cp}, DestinationGroups: []string{GroupPods}, Ports: all,
				Consumer: "kube-apiserver: admission webhooks, aggregated APIs and the pod proxy"},
			{Name: "pods-from-pods", Priority: 120, Access: "Allow", Protocol: "*", SourceGroups: []string{GroupPods}, DestinationGroups: []string{GroupPods}, Ports: all,
				Consumer: "pod-to-pod traffic"},
			{Name: "pods-from-nodes", Priority: 130, Access: "Allow", Protocol: "*", SourceGroups: []string{GroupNodes}, DestinationGroups: []string{GroupPods}, Ports: all,
				Consumer: "kubelet probes, and host-network pods reaching pods"},
			{Name: "pods-from-hub", Priority: 140, Access: "Allow", Protocol: "*", Sources: []string{hub}, DestinationGroups: []string{GroupPods}, Ports: all,
				Consumer: "researchers reaching pod IPs through the hub (L31)"},
			{Name: "nodes-from-nodes", Priority: 150, Access: "Allow", Protocol: "*", SourceGroups: []string{GroupNodes}, DestinationGroups: []string{GroupNodes}, Ports: all,
				Consumer: "host-network training pods talking to each other at full speed (L33)"},
			{Name: "node-exporter-from-pods", Priority: 160, Access: "Allow", Protocol: "Tcp", SourceGroups: []string{GroupPods}, DestinationGroups: []string{GroupNodes}, Ports: []string{port(wellknown.NodeExporterPort)},
				Consumer: "Prometheus, a pod, scraping node-exporter on the host network"},
			{Name: "traffic-metrics-from-pods", Priority: 170, Access: "Allow", Protocol: "Tcp", SourceGroups: []string{GroupPods}, DestinationGroups: []string{GroupNodes}, Ports: []string{port(wellknown.TrafficMetricsPort)},
				Consumer: "Prometheus, a pod, scraping the ops agents' pod traffic counters on the host network (L32)"},
			nodeSSH, deny,
		},
	}
}

// SecurityGroupArgs maps a subnet's rules to azure-native arguments; groups maps GroupNodes and
// GroupPods to application security group ids.
func SecurityGroupArgs(c *spec.Cluster, rg pulumi.StringInput, role string, groups map[string]pulumi.StringInput) *network.NetworkSecurityGroupArgs {
	refs := func(names []string) network.ApplicationSecurityGroupTypeArray {
		var out network.ApplicationSecurityGroupTypeArray
		for _, g := range names {
			out = append(out, network.ApplicationSecurityGroupTypeArgs{Id: groups[g]})
		}
		return out
	}
	var rules network.SecurityRuleTypeArray
	for _, r := range InboundRules(c)[role] {
		args := network.SecurityRuleTypeArgs{
			Name: pulumi.String(r.Name), Priority: pulumi.Int(r.Priority), Direction: pulumi.String("Inbound"),
			Access: pulumi.String(r.Access), Protocol: pulumi.String(r.Protocol), Description: pulumi.String(r.Consumer),
			SourcePortRange: pulumi.String("*"), DestinationPortRanges: pulumi.ToStringArray(r.Ports),
		}
		if len(r.SourceGroups) > 0 {
			args.SourceApplicationSecurityGroups = refs(r.SourceGroups)
		} else {
			args.SourceAddressPrefixes = pulumi.ToStringArray(r.Sources)
		}
		if len(r.DestinationGroups) > 0 {
			args.DestinationApplicationSecurityGroups = refs(r.DestinationGroups)
		} else {
			args.DestinationAddressPrefix = pulumi.String("*")
		}
		rules = append(rules, args)
	}
	return &network.NetworkSecurityGroupArgs{
		ResourceGroupName: rg, Location: pulumi.String(c.Location), SecurityRules: rules, Tags: tags(c, role),
	}
}

// SubnetPrefix is the CIDR of a subnet role.
func SubnetPrefix(c *spec.Cluster, role string) string {
	return map[string]string{
		SubnetControlPlane: c.Network.ControlPlaneSubnet,
		SubnetEtcd:         c.Network.EtcdSubnet,
		SubnetNodes:        c.Network.NodeSubnet,
	}[role]
}

// NetworkArgs configures NewNetwork.
type NetworkArgs struct {
	Cluster           *spec.Cluster
	ResourceGroupName pulumi.StringInput
}

// Network is the spoke VNet: subnets with NSGs, a NAT gateway for egress, and peering with the
// hub in both directions, never with another spoke (L31).
type Network struct {
	pulumi.ResourceState

	VNetID    pulumi.IDOutput
	SubnetIDs map[string]pulumi.IDOutput
	// GroupIDs are the application security groups' ids by Groups name.
	GroupIDs map[string]pulumi.IDOutput
}

// NewNetwork builds the spoke network.
func NewNetwork(ctx *pulumi.Context, name string, args *NetworkArgs, opts ...pulumi.ResourceOption) (*Network, error) {
	comp := &Network{SubnetIDs: map[string]pulumi.IDOutput{}, GroupIDs: map[string]pulumi.IDOutput{}}
	if err := ctx.RegisterComponentResource("clusterforge:azure:Network", name, comp, opts...); err != nil {
		return nil, err
	}
	c, rg, parent := args.Cluster, args.ResourceGroupName, pulumi.Parent(comp)

	vnet, err := network.NewVirtualNetwork(ctx, name+"-vnet", &network.VirtualNetworkArgs{
		ResourceGroupName: rg, Location: pulumi.String(c.Location), Tags: tags(c, ""),
		AddressSpace: &network.AddressSpaceArgs{AddressPrefixes: pulumi.ToStringArray([]string{c.Network.AddressSpace})},
	}, parent)
	if err != nil {
		return nil, err
	}
	// Enough public IPs for every node's peak egress at once (spec.NATPublicIPs): each adds 64,512
	// SNAT ports. The first keeps its name, so growing the fleet adds addresses and replaces none.
	var natIPs network.SubResourceArray
	for i := range c.NATPublicIPs() {
		ipName := name + "-nat-ip"
		if i > 0 {
			ipName = fmt.Sprintf("%s-%d", ipName, i+1)
		}
		ip, err := network.NewPublicIPAddress(ctx, ipName, &network.PublicIPAddressArgs{
			ResourceGroupName: rg, Location: pulumi.String(c.Location), Tags: tags(c, ""),
			Sku:                      &network.PublicIPAddressSkuArgs{Name: pulumi.String("Standard")},
			PublicIPAllocationMethod: pulumi.String("Static"),
		}, parent)
		if err != nil {
			return nil, err
		}
		natIPs = append(natIPs, network.SubResourceArgs{Id: ip.ID()})
	}
	nat, err := network.NewNatGateway(ctx, name+"-nat", &network.NatGatewayArgs{
		ResourceGroupName: rg, Location: pulumi.String(c.Location), Tags: tags(c, ""),
		Sku:               &network.NatGatewaySkuArgs{Name: pulumi.String("Standard")},
		PublicIpAddresses: natIPs,
	}, parent)
	if err != nil {
		return nil, err
	}
	groups := map[string]pulumi.StringInput{}
	for _, g := range Groups {
		asg, err := network.NewApplicationSecurityGroup(ctx, name+"-"+g+"-asg", &network.ApplicationSecurityGroupArgs{
			ResourceGroupName: rg, Location: pulumi.String(c.Location), Tags: tags(c, ""),
		}, parent)
		if err != nil {
			return nil, err
		}
		comp.GroupIDs[g], groups[g] = asg.ID(), asg.ID()
	}
	var previous pulumi.Resource
	for _, role := range SubnetRoles {
		nsg, err := network.NewNetworkSecurityGroup(ctx, name+"-"+role+"-nsg", SecurityGroupArgs(c, rg, role, groups), parent)
		if err != nil {
			return nil, err
		}
		subnetOpts := []pulumi.ResourceOption{parent}
		if previous != nil {
			// Azure rejects concurrent subnet changes on one VNet.
			subnetOpts = append(subnetOpts, pulumi.DependsOn([]pulumi.Resource{previous}))
		}
		subnet, err := network.NewSubnet(ctx, name+"-"+role, &network.SubnetArgs{
			ResourceGroupName: rg, VirtualNetworkName: vnet.Name, SubnetName: pulumi.String(role),
			AddressPrefix:        pulumi.String(SubnetPrefix(c, role)),
			NetworkSecurityGroup: &network.NetworkSecurityGroupTypeArgs{Id: nsg.ID()},
			NatGateway:           &network.SubResourceArgs{Id: nat.ID()},
		}, subnetOpts...)
		if err != nil {
			return nil, err
		}
		comp.SubnetIDs[role], previous = subnet.ID(), subnet
	}

	hub := c.HubVNet()
	if _, err := network.NewVirtualNetworkPeering(ctx, name+"-to-hub", &network.VirtualNetworkPeeringArgs{
		ResourceGroupName: rg, VirtualNetworkName: vnet.Name,
		RemoteVirtualNetwork:      &network.SubResourceArgs{Id: pulumi.String(c.Network.Hub.VNetID)},
		AllowVirtualNetworkAccess: pulumi.Bool(true), AllowForwardedTraffic: pulumi.Bool(false),
	}, parent); err != nil {
		return nil, err
	}
	if _, err := network.NewVirtualNetworkPeering(ctx, name+"-from-hub", &network.VirtualNetworkPeeringArgs{
		ResourceGroupName: pulumi.String(hub.ResourceGroup), VirtualNetworkName: pulumi.String(hub.Names[0]),
		VirtualNetworkPeeringName: pulumi.String(c.HubPeeringName()),
		RemoteVirtualNetwork:      &network.SubResourceArgs{Id: vnet.ID()},
		// Spokes never reach each other: the hub does not forward between them (L31).
		AllowVirtualNetworkAccess: pulumi.Bool(true), AllowForwardedTraffic: pulumi.Bool(false),
	}, parent); err != nil {
		return nil, err
	}

	comp.VNetID = vnet.ID()
	outputs := pulumi.Map{"vnetId": vnet.ID()}
	for role, id := range comp.SubnetIDs {
		outputs[role+"SubnetId"] = id
	}
	for g, id := range comp.GroupIDs {
		outputs[g+"GroupId"] = id
	}
	if err := ctx.RegisterResourceOutputs(comp, outputs); err != nil {
		return nil, err
	}
	return comp, nil
}
