package azure

import (
	"fmt"
	"strconv"
	"strings"

	"github.com/pulumi/pulumi-azure-native-sdk/network/v2"
	"github.com/pulumi/pulumi/sdk/v3/go/pulumi"

	"github.com/clusterforge/clusterforge/components/spec"
)

// Subnet roles of the spoke VNet.
const (
	SubnetControlPlane = "controlplane"
	SubnetEtcd         = "etcd"
	SubnetNodes        = "nodes"
)

// SubnetRoles lists the subnets in creation order.
var SubnetRoles = []string{SubnetControlPlane, SubnetEtcd, SubnetNodes}

// Rule is one inbound NSG rule, before it becomes azure-native arguments.
type Rule struct {
	Name     string
	Priority int
	Access   string // Allow or Deny
	Protocol string // Tcp or *
	Sources  []string
	Ports    []string
}

// denyVNetPriority sits below every allow rule and above Azure's default AllowVnetInBound (65000),
// so only the listed peers reach a subnet.
const denyVNetPriority = 4000

// InboundRules is the least-privilege inbound policy of each subnet: etcd ports only from the
// apiservers and etcd peers; the API port from the hub, the nodes and the control plane; kubelets
// only from the control plane; SSH only from the hub (L31); everything else from the VNet denied.
func InboundRules(c *spec.Cluster) map[string][]Rule {
	n := c.Network
	hub, cp, etcd, nodes := n.Hub.AddressSpace, n.ControlPlaneSubnet, n.EtcdSubnet, n.NodeSubnet
	port := strconv.Itoa
	ssh := Rule{Name: "ssh-from-hub", Priority: 200, Access: "Allow", Protocol: "Tcp", Sources: []string{hub}, Ports: []string{port(spec.SSHPort)}}
	deny := Rule{Name: "deny-other-vnet", Priority: denyVNetPriority, Access: "Deny", Protocol: "*", Sources: []string{"VirtualNetwork"}, Ports: []string{"*"}}
	return map[string][]Rule{
		SubnetControlPlane: {
			{Name: "api-from-clients", Priority: 100, Access: "Allow", Protocol: "Tcp", Sources: []string{hub, nodes, cp}, Ports: []string{port(spec.APIServerPort)}},
			{Name: "api-probe", Priority: 110, Access: "Allow", Protocol: "Tcp", Sources: []string{"AzureLoadBalancer"}, Ports: []string{port(spec.APIServerPort)}},
			ssh, deny,
		},
		SubnetEtcd: {
			{Name: "etcd-client-from-apiservers", Priority: 100, Access: "Allow", Protocol: "Tcp", Sources: []string{cp}, Ports: []string{port(spec.EtcdClientPort), port(spec.EtcdMetricsPort)}},
			{Name: "etcd-from-peers", Priority: 110, Access: "Allow", Protocol: "Tcp", Sources: []string{etcd}, Ports: []string{port(spec.EtcdClientPort), port(spec.EtcdPeerPort)}},
			// Prometheus runs in a pod with a node-subnet address; metrics only, never the client port.
			{Name: "etcd-metrics-from-pods", Priority: 120, Access: "Allow", Protocol: "Tcp", Sources: []string{nodes}, Ports: []string{port(spec.EtcdMetricsPort)}},
			ssh, deny,
		},
		SubnetNodes: {
			{Name: "kubelet-from-apiservers", Priority: 100, Access: "Allow", Protocol: "Tcp", Sources: []string{cp}, Ports: []string{port(spec.KubeletPort)}},
			// Pods talk to pods across nodes; researchers reach pod IPs from the hub (L31).
			{Name: "pods-from-nodes-and-hub", Priority: 110, Access: "Allow", Protocol: "*", Sources: []string{nodes, hub}, Ports: []string{"*"}},
			ssh, deny,
		},
	}
}

// SecurityGroupArgs maps a subnet's rules to azure-native arguments.
func SecurityGroupArgs(c *spec.Cluster, rg pulumi.StringInput, role string) *network.NetworkSecurityGroupArgs {
	var rules network.SecurityRuleTypeArray
	for _, r := range InboundRules(c)[role] {
		rules = append(rules, network.SecurityRuleTypeArgs{
			Name: pulumi.String(r.Name), Priority: pulumi.Int(r.Priority), Direction: pulumi.String("Inbound"),
			Access: pulumi.String(r.Access), Protocol: pulumi.String(r.Protocol),
			SourceAddressPrefixes: pulumi.ToStringArray(r.Sources), SourcePortRange: pulumi.String("*"),
			DestinationAddressPrefix: pulumi.String("*"), DestinationPortRanges: pulumi.ToStringArray(r.Ports),
		})
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

// hubParts splits the hub VNet id into its resource group and name.
func hubParts(vnetID string) (resourceGroup, name string) {
	parts := strings.Split(vnetID, "/")
	return parts[4], parts[8]
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
}

// NewNetwork builds the spoke network.
func NewNetwork(ctx *pulumi.Context, name string, args *NetworkArgs, opts ...pulumi.ResourceOption) (*Network, error) {
	comp := &Network{SubnetIDs: map[string]pulumi.IDOutput{}}
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
	ip, err := network.NewPublicIPAddress(ctx, name+"-nat-ip", &network.PublicIPAddressArgs{
		ResourceGroupName: rg, Location: pulumi.String(c.Location), Tags: tags(c, ""),
		Sku:                      &network.PublicIPAddressSkuArgs{Name: pulumi.String("Standard")},
		PublicIPAllocationMethod: pulumi.String("Static"),
	}, parent)
	if err != nil {
		return nil, err
	}
	nat, err := network.NewNatGateway(ctx, name+"-nat", &network.NatGatewayArgs{
		ResourceGroupName: rg, Location: pulumi.String(c.Location), Tags: tags(c, ""),
		Sku:               &network.NatGatewaySkuArgs{Name: pulumi.String("Standard")},
		PublicIpAddresses: network.SubResourceArray{network.SubResourceArgs{Id: ip.ID()}},
	}, parent)
	if err != nil {
		return nil, err
	}
	var previous pulumi.Resource
	for _, role := range SubnetRoles {
		nsg, err := network.NewNetworkSecurityGroup(ctx, name+"-"+role+"-nsg", SecurityGroupArgs(c, rg, role), parent)
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

	hubRG, hubName := hubParts(c.Network.Hub.VNetID)
	if _, err := network.NewVirtualNetworkPeering(ctx, name+"-to-hub", &network.VirtualNetworkPeeringArgs{
		ResourceGroupName: rg, VirtualNetworkName: vnet.Name,
		RemoteVirtualNetwork:      &network.SubResourceArgs{Id: pulumi.String(c.Network.Hub.VNetID)},
		AllowVirtualNetworkAccess: pulumi.Bool(true), AllowForwardedTraffic: pulumi.Bool(false),
	}, parent); err != nil {
		return nil, err
	}
	if _, err := network.NewVirtualNetworkPeering(ctx, name+"-from-hub", &network.VirtualNetworkPeeringArgs{
		ResourceGroupName: pulumi.String(hubRG), VirtualNetworkName: pulumi.String(hubName),
		VirtualNetworkPeeringName: pulumi.String(fmt.Sprintf("spoke-%s", c.Name)),
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
	if err := ctx.RegisterResourceOutputs(comp, outputs); err != nil {
		return nil, err
	}
	return comp, nil
}
