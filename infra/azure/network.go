package azure

import (
	"fmt"
	"strconv"

	"github.com/pulumi/pulumi-azure-native-sdk/network/v2"
	"github.com/pulumi/pulumi/sdk/v3/go/pulumi"

	"github.com/clusterforge/clusterforge/components/spec"
	"github.com/clusterforge/clusterforge/components/wellknown"
)

// Subnet roles: the control plane's VNet holds the first two; each worker VNet one nodes subnet.
const (
	SubnetControlPlane = "controlplane"
	SubnetEtcd         = "etcd"
	SubnetNodes        = "nodes"
)

// ControlPlaneSubnets lists the control plane VNet's subnets in creation order.
var ControlPlaneSubnets = []string{SubnetControlPlane, SubnetEtcd}

// GroupNodes is each worker VNet's application security group of node addresses: a NIC's primary
// IP configuration. Pods are not a group: one holds 4,000 IP configurations (spec.LimitIPConfigsPerASG).
const GroupNodes = "nodes"

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
	// DestinationGroups narrows the destination to the subnet's nodes; empty is any.
	DestinationGroups []string
	Ports             []string
	// Consumer is the component the rule lets in; a rule without one does not exist.
	Consumer string
}

// denyVNetPriority sits below every allow rule and above Azure's default AllowVnetInBound (65000),
// so only the listed peers reach a subnet.
const denyVNetPriority = 4000

// InboundRules is the least-privilege inbound policy of each subnet, by its NSG's key (a control
// plane subnet role, or a worker VNet's name), every allow rule named by the component it serves;
// everything else from the peered VNets and the hub is denied (L31). A group reaches no further
// than its VNet, so traffic between worker VNets is told by address: pods and nodes alike.
func InboundRules(c *spec.Cluster) map[string][]Rule {
	n := c.Network
	hub, cp, etcd := n.Hub.AddressSpace, n.ControlPlaneSubnet, n.EtcdSubnet
	workers := c.WorkerVNets()
	var allWorkers []string
	for _, w := range workers {
		allWorkers = append(allWorkers, w.Prefix)
	}
	port := strconv.Itoa
	all := []string{"*"}
	ssh := Rule{Name: "ssh-from-hub", Priority: 200, Access: "Allow", Protocol: "Tcp", Sources: []string{hub}, Ports: []string{port(wellknown.SSHPort)},
		Consumer: "break-glass SSH from the hub (L31)"}
	deny := Rule{Name: "deny-other-vnet", Priority: denyVNetPriority, Access: "Deny", Protocol: "*", Sources: []string{"VirtualNetwork"}, Ports: all,
		Consumer: "everything not listed above"}
	rules := map[string][]Rule{
		SubnetControlPlane: {
			{Name: "api-from-clients", Priority: 100, Access: "Allow", Protocol: "Tcp", Sources: append([]string{hub, cp}, allWorkers...), Ports: []string{port(wellknown.APIServerPort)},
				Consumer: "kube-apiserver: kubelets and pods, operators from the hub, the control plane itself"},
			{Name: "api-probe", Priority: 110, Access: "Allow", Protocol: "Tcp", Sources: []string{"AzureLoadBalancer"}, Ports: []string{port(wellknown.APIServerPort)},
				Consumer: "the load balancer's /readyz probe"},
			{Name: "certificates-from-workers", Priority: 120, Access: "Allow", Protocol: "Tcp", Sources: allWorkers, Ports: []string{port(wellknown.CertificateMetricsPort)},
				Consumer: "Prometheus, a pod, reading certificate expiry from clusterforge-csr-approver"},
			ssh, deny,
		},
		SubnetEtcd: {
			{Name: "etcd-client-from-apiservers", Priority: 100, Access: "Allow", Protocol: "Tcp", Sources: []string{cp}, Ports: []string{port(wellknown.EtcdClientPort)},
				Consumer: "kube-apiserver's etcd client"},
			{Name: "etcd-from-peers", Priority: 110, Access: "Allow", Protocol: "Tcp", Sources: []string{etcd}, Ports: []string{port(wellknown.EtcdClientPort), port(wellknown.EtcdPeerPort)},
				Consumer: "etcd peers, and etcd-join.service's member add/remove"},
			{Name: "etcd-metrics-from-workers", Priority: 120, Access: "Allow", Protocol: "Tcp", Sources: allWorkers, Ports: []string{port(wellknown.EtcdMetricsPort), port(wellknown.EtcdBackupMetricsPort)},
				Consumer: "Prometheus, a pod, scraping etcd's metrics port and the backup agent's (never the client port)"},
			ssh, deny,
		},
	}
	nodes := []string{GroupNodes}
	for _, w := range workers {
		vnet := []Rule{
			{Name: "kubelet-from-apiservers", Priority: 100, Access: "Allow", Protocol: "Tcp", Sources: []string{cp}, DestinationGroups: nodes, Ports: []string{port(wellknown.KubeletPort)},
				Consumer: "kube-apiserver: logs, exec, port-forward"},
			{Name: "kubelet-from-no-one-else", Priority: 110, Access: "Deny", Protocol: "*", Sources: []string{"VirtualNetwork"}, DestinationGroups: nodes, Ports: []string{port(wellknown.KubeletPort)},
				Consumer: "the kubelet answers the apiservers only"},
			{Name: "node-agents-from-workers", Priority: 130, Access: "Allow", Protocol: "Tcp", Sources: allWorkers, DestinationGroups: nodes,
				Ports:    []string{port(wellknown.NodeExporterPort), port(wellknown.TrafficMetricsPort)},
				Consumer: "Prometheus, a pod, scraping node-exporter and the ops agents' traffic counters on the host network (L32)"},
			{Name: "hub-to-nodes", Priority: 150, Access: "Allow", Protocol: "Tcp", Sources: []string{hub}, DestinationGroups: nodes, Ports: []string{port(wellknown.SSHPort)},
				Consumer: "break-glass SSH from the hub (L31)"},
			{Name: "no-more-to-nodes", Priority: 160, Access: "Deny", Protocol: "*", Sources: append([]string{hub, cp}, allWorkers...), DestinationGroups: nodes, Ports: all,
				Consumer: "a node's other ports are its own: pods, other pools, the control plane and the hub stop here"},
			{Name: "pods-from-control-plane", Priority: 170, Access: "Allow", Protocol: "Tcp", Sources: []string{cp}, Ports: all,
				Consumer: "kube-apiserver: admission webhooks, aggregated APIs and the pod proxy"},
			{Name: "pods-from-workers", Priority: 180, Access: "Allow", Protocol: "*", Sources: allWorkers, Ports: all,
				Consumer: "pod-to-pod traffic across every worker VNet, a training gang's at full speed by pod IP (L33), and host-network pods reaching pods"},
		}
		if c.ReachWorkers() {
			vnet = append(vnet, Rule{Name: "pods-from-hub", Priority: 190, Access: "Allow", Protocol: "*", Sources: []string{hub}, Ports: all,
				Consumer: "researchers reaching pod IPs through the hub (L31)"})
		}
		rules[w.Name] = append(vnet, deny)
	}
	return rules
}

// SecurityGroupArgs maps the rules of one NSG (by InboundRules' key) to azure-native arguments;
// groups maps GroupNodes to its VNet's application security group id.
func SecurityGroupArgs(c *spec.Cluster, rg pulumi.StringInput, key string, groups map[string]pulumi.StringInput) *network.NetworkSecurityGroupArgs {
	refs := func(names []string) network.ApplicationSecurityGroupTypeArray {
		var out network.ApplicationSecurityGroupTypeArray
		for _, g := range names {
			out = append(out, network.ApplicationSecurityGroupTypeArgs{Id: groups[g]})
		}
		return out
	}
	var rules network.SecurityRuleTypeArray
	for _, r := range InboundRules(c)[key] {
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
	role := key
	if key != SubnetControlPlane && key != SubnetEtcd {
		role = SubnetNodes
	}
	return &network.NetworkSecurityGroupArgs{
		ResourceGroupName: rg, Location: pulumi.String(c.Location), SecurityRules: rules, Tags: tags(c, role),
	}
}

// SubnetPrefix is the CIDR of a control plane subnet role.
func SubnetPrefix(c *spec.Cluster, role string) string {
	return map[string]string{
		SubnetControlPlane: c.Network.ControlPlaneSubnet,
		SubnetEtcd:         c.Network.EtcdSubnet,
	}[role]
}

// NetworkArgs configures NewNetwork.
type NetworkArgs struct {
	Cluster           *spec.Cluster
	ResourceGroupName pulumi.StringInput
}

// Network is the cluster's VNets (docs/design/pod-network.md): the control plane's, peered with
// the hub, and each pool's worker VNets, peered with it, with each other and, when the hub reaches
// the workers, with the hub; never with another cluster's (L31). Each VNet has its subnets with
// their NSGs and its own NAT gateway for egress (one cannot span VNets).
type Network struct {
	pulumi.ResourceState

	// VNetID is the control plane's VNet.
	VNetID    pulumi.IDOutput
	SubnetIDs map[string]pulumi.IDOutput
	// WorkerSubnetIDs and NodeGroupIDs are each worker VNet's subnet and nodes group, by its name.
	WorkerSubnetIDs map[string]pulumi.IDOutput
	NodeGroupIDs    map[string]pulumi.IDOutput
}

// NewNetwork builds the cluster's VNets.
func NewNetwork(ctx *pulumi.Context, name string, args *NetworkArgs, opts ...pulumi.ResourceOption) (*Network, error) {
	comp := &Network{SubnetIDs: map[string]pulumi.IDOutput{}, WorkerSubnetIDs: map[string]pulumi.IDOutput{}, NodeGroupIDs: map[string]pulumi.IDOutput{}}
	if err := ctx.RegisterComponentResource("clusterforge:azure:Network", name, comp, opts...); err != nil {
		return nil, err
	}
	c, rg, parent := args.Cluster, args.ResourceGroupName, pulumi.Parent(comp)
	b := &networkBuilder{ctx: ctx, c: c, rg: rg, parent: parent}

	cpVNet, err := b.vnet(name+"-vnet", c.Network.AddressSpace)
	if err != nil {
		return nil, err
	}
	nat, err := b.natGateway(name, c.ControlPlaneMachines())
	if err != nil {
		return nil, err
	}
	var previous pulumi.Resource
	for _, role := range ControlPlaneSubnets {
		subnet, err := b.subnet(name+"-"+role, cpVNet, role, SubnetPrefix(c, role), role, nat, nil, previous)
		if err != nil {
			return nil, err
		}
		comp.SubnetIDs[role], previous = subnet.ID(), subnet
	}
	if err := b.hubPeering(name, cpVNet, c.HubPeeringName()); err != nil {
		return nil, err
	}

	workers := c.WorkerVNets()
	vnets := map[string]*network.VirtualNetwork{}
	for _, w := range workers {
		vnet, err := b.vnet(name+"-"+w.Name, w.Prefix)
		if err != nil {
			return nil, err
		}
		vnets[w.Name] = vnet
		nat, err := b.natGateway(name+"-"+w.Name, w.Nodes())
		if err != nil {
			return nil, err
		}
		asg, err := network.NewApplicationSecurityGroup(ctx, name+"-"+w.Name+"-"+GroupNodes+"-asg", &network.ApplicationSecurityGroupArgs{
			ResourceGroupName: rg, Location: pulumi.String(c.Location), Tags: tags(c, ""),
		}, parent)
		if err != nil {
			return nil, err
		}
		subnet, err := b.subnet(name+"-"+w.Name+"-"+SubnetNodes, vnet, SubnetNodes, w.Prefix, w.Name, nat,
			map[string]pulumi.StringInput{GroupNodes: asg.ID()}, nil)
		if err != nil {
			return nil, err
		}
		comp.WorkerSubnetIDs[w.Name], comp.NodeGroupIDs[w.Name] = subnet.ID(), asg.ID()
		// Pod to pod and kubelet to API everywhere: the control plane's VNet and every earlier
		// worker VNet, both ways.
		if err := b.peer(name+"-"+w.Name+"-cp", vnet, cpVNet, w.Name, c.ControlPlaneVNetName()); err != nil {
			return nil, err
		}
		for _, o := range workers {
			if o.Name == w.Name {
				break
			}
			if err := b.peer(name+"-"+w.Name+"-"+o.Name, vnet, vnets[o.Name], w.Name, o.Name); err != nil {
				return nil, err
			}
		}
		if c.ReachWorkers() {
			if err := b.hubPeering(name+"-"+w.Name, vnet, c.HubPeeringNameOf(w)); err != nil {
				return nil, err
			}
		}
	}

	comp.VNetID = cpVNet.ID()
	outputs := pulumi.Map{"vnetId": cpVNet.ID()}
	for role, id := range comp.SubnetIDs {
		outputs[role+"SubnetId"] = id
	}
	for vnet, id := range comp.WorkerSubnetIDs {
		outputs[vnet+"-subnetId"] = id
	}
	if err := ctx.RegisterResourceOutputs(comp, outputs); err != nil {
		return nil, err
	}
	return comp, nil
}

// networkBuilder makes the resources every VNet of the cluster repeats.
type networkBuilder struct {
	ctx    *pulumi.Context
	c      *spec.Cluster
	rg     pulumi.StringInput
	parent pulumi.ResourceOption
}

func (b *networkBuilder) vnet(name, prefix string) (*network.VirtualNetwork, error) {
	return network.NewVirtualNetwork(b.ctx, name, &network.VirtualNetworkArgs{
		ResourceGroupName: b.rg, Location: pulumi.String(b.c.Location), Tags: tags(b.c, ""),
		AddressSpace: &network.AddressSpaceArgs{AddressPrefixes: pulumi.ToStringArray([]string{prefix})},
	}, b.parent)
}

// natGateway is a VNet's egress: enough public IPs for nodes machines' peak at once
// (spec.NATPublicIPs), each 64,512 SNAT ports. The first keeps its name, so growth adds addresses
// and replaces none.
func (b *networkBuilder) natGateway(name string, nodes int) (*network.NatGateway, error) {
	var ips network.SubResourceArray
	for i := range b.c.NATPublicIPs(nodes) {
		ipName := name + "-nat-ip"
		if i > 0 {
			ipName = fmt.Sprintf("%s-%d", ipName, i+1)
		}
		ip, err := network.NewPublicIPAddress(b.ctx, ipName, &network.PublicIPAddressArgs{
			ResourceGroupName: b.rg, Location: pulumi.String(b.c.Location), Tags: tags(b.c, ""),
			Sku:                      &network.PublicIPAddressSkuArgs{Name: pulumi.String("Standard")},
			PublicIPAllocationMethod: pulumi.String("Static"),
		}, b.parent)
		if err != nil {
			return nil, err
		}
		ips = append(ips, network.SubResourceArgs{Id: ip.ID()})
	}
	return network.NewNatGateway(b.ctx, name+"-nat", &network.NatGatewayArgs{
		ResourceGroupName: b.rg, Location: pulumi.String(b.c.Location), Tags: tags(b.c, ""),
		Sku:               &network.NatGatewaySkuArgs{Name: pulumi.String("Standard")},
		PublicIpAddresses: ips,
	}, b.parent)
}

// subnet makes a subnet with its NSG (InboundRules' key) behind the VNet's NAT gateway; after, when
// set, is the VNet's previous subnet: Azure refuses concurrent subnet changes on one VNet.
func (b *networkBuilder) subnet(name string, vnet *network.VirtualNetwork, subnetName, prefix, rulesKey string, nat *network.NatGateway,
	groups map[string]pulumi.StringInput, after pulumi.Resource) (*network.Subnet, error) {
	nsg, err := network.NewNetworkSecurityGroup(b.ctx, name+"-nsg", SecurityGroupArgs(b.c, b.rg, rulesKey, groups), b.parent)
	if err != nil {
		return nil, err
	}
	opts := []pulumi.ResourceOption{b.parent}
	if after != nil {
		opts = append(opts, pulumi.DependsOn([]pulumi.Resource{after}))
	}
	return network.NewSubnet(b.ctx, name, &network.SubnetArgs{
		ResourceGroupName: b.rg, VirtualNetworkName: vnet.Name, SubnetName: pulumi.String(subnetName),
		AddressPrefix:        pulumi.String(prefix),
		NetworkSecurityGroup: &network.NetworkSecurityGroupTypeArgs{Id: nsg.ID()},
		NatGateway:           &network.SubResourceArgs{Id: nat.ID()},
	}, opts...)
}

// peer joins two of the cluster's VNets both ways; neither forwards traffic from elsewhere.
func (b *networkBuilder) peer(name string, a, z *network.VirtualNetwork, aName, zName string) error {
	for _, side := range []struct {
		vnet   *network.VirtualNetwork
		remote *network.VirtualNetwork
		peer   string
	}{{a, z, "to-" + zName}, {z, a, "to-" + aName}} {
		if _, err := network.NewVirtualNetworkPeering(b.ctx, name+"-"+side.peer, &network.VirtualNetworkPeeringArgs{
			ResourceGroupName: b.rg, VirtualNetworkName: side.vnet.Name, VirtualNetworkPeeringName: pulumi.String(side.peer),
			RemoteVirtualNetwork:      &network.SubResourceArgs{Id: side.remote.ID()},
			AllowVirtualNetworkAccess: pulumi.Bool(true), AllowForwardedTraffic: pulumi.Bool(false),
		}, b.parent); err != nil {
			return err
		}
	}
	return nil
}

// hubPeering peers a VNet with the hub both ways; the hub's side is named hubSide.
func (b *networkBuilder) hubPeering(name string, vnet *network.VirtualNetwork, hubSide string) error {
	hub := b.c.HubVNet()
	if _, err := network.NewVirtualNetworkPeering(b.ctx, name+"-to-hub", &network.VirtualNetworkPeeringArgs{
		ResourceGroupName: b.rg, VirtualNetworkName: vnet.Name,
		RemoteVirtualNetwork:      &network.SubResourceArgs{Id: pulumi.String(b.c.Network.Hub.VNetID)},
		AllowVirtualNetworkAccess: pulumi.Bool(true), AllowForwardedTraffic: pulumi.Bool(false),
	}, b.parent); err != nil {
		return err
	}
	_, err := network.NewVirtualNetworkPeering(b.ctx, name+"-from-hub", &network.VirtualNetworkPeeringArgs{
		ResourceGroupName: pulumi.String(hub.ResourceGroup), VirtualNetworkName: pulumi.String(hub.Names[0]),
		VirtualNetworkPeeringName: pulumi.String(hubSide),
		RemoteVirtualNetwork:      &network.SubResourceArgs{Id: vnet.ID()},
		// Spokes never reach each other: the hub does not forward between them (L31).
		AllowVirtualNetworkAccess: pulumi.Bool(true), AllowForwardedTraffic: pulumi.Bool(false),
	}, b.parent)
	return err
}
