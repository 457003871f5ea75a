package spec

import (
	"fmt"
	"maps"
	"slices"
	"strings"
)

// LimitKind says what a plan over a limit means.
type LimitKind string

const (
	// Hard limits no request raises: a plan over one cannot reach its size.
	Hard LimitKind = "hard"
	// Quota limits are defaults Azure raises on request: a plan over one needs that request first.
	Quota LimitKind = "quota"
	// Rate limits are token buckets: an operation larger than the bucket is throttled, not refused.
	Rate LimitKind = "rate"
)

// Limit is one of Azure's limits a cluster of this kind meets.
type Limit struct {
	// Name is Azure's wording of the row.
	Name string
	// Value is the limit; for a quota, the default a subscription starts with.
	Value int64
	Kind  LimitKind
	// Per is what one Value applies to.
	Per string
	// Source is the page that states it (read 2026-11).
	Source string
}

// Pages the limits come from.
const (
	limitsPage     = "https://learn.microsoft.com/azure/azure-resource-manager/management/azure-subscription-service-limits"
	networkLimits  = limitsPage + "#azure-resource-manager-virtual-networking-limits"
	scaleSetLimits = limitsPage + "#virtual-machine-scale-sets-limits"
	vmLimits       = limitsPage + "#virtual-machines-limits"
	lbLimits       = limitsPage + "#load-balancer"
	placementPage  = "https://learn.microsoft.com/azure/virtual-machine-scale-sets/virtual-machine-scale-sets-placement-groups"
	natPage        = "https://learn.microsoft.com/azure/nat-gateway/nat-gateway-resource"
	disksFAQ       = "https://learn.microsoft.com/azure/virtual-machines/faq-for-disks"
	computeRates   = "https://learn.microsoft.com/azure/virtual-machines/compute-throttling-limits"
	managerRates   = "https://learn.microsoft.com/azure/azure-resource-manager/management/request-limits-and-throttling"
)

// Values other code sizes things by.
const (
	// MaxScaleSetInstances is what one VMSS holds with singlePlacementGroup=false and a gallery image.
	MaxScaleSetInstances = 1000
	// MaxPlacementGroupInstances is what one VMSS holds with singlePlacementGroup=true, which
	// InfiniBand sizes need: the IB fabric spans one placement group.
	MaxPlacementGroupInstances = 100
	// MaxCustomDataBytes is Azure's limit on decoded customData.
	MaxCustomDataBytes = 65535
	// MaxResourceTags is how many tags one Azure resource carries
	// (https://learn.microsoft.com/azure/azure-resource-manager/management/tag-resources#limitations).
	MaxResourceTags = 50
	// SNATPortsPerPublicIP and MaxNATPublicIPs: one NAT gateway's egress (natPage, "Scalability").
	SNATPortsPerPublicIP = 64512
	MaxNATPublicIPs      = 16
	maxIPConfigsPerNIC   = 256
	privateIPsPerVNet    = 65536
	// workerVNetAddresses is what a worker VNet gives its NICs: Azure's limit, less the five
	// addresses Azure keeps in its one subnet.
	workerVNetAddresses int64 = privateIPsPerVNet - azureReservedAddresses
	// maxPodsPerNode: a node's NIC has its primary IP configuration and one secondary per pod (L29).
	maxPodsPerNode = maxIPConfigsPerNIC - 1
)

// Azure's limits, each once. Networking rows without a maximum column are hard: "If there's no
// maximum limit column, the resource doesn't have adjustable limits" (networkLimits).
var (
	LimitPrivateIPsPerVNet = Limit{Name: "Private IP addresses per virtual network", Value: privateIPsPerVNet, Kind: Hard,
		Per: "virtual network", Source: networkLimits}
	// LimitPrivateIPsPerPeeredGroup counts a VNet's addresses with those of every VNet peered with
	// it: each host of a VNet holds the mappings of all of them.
	LimitPrivateIPsPerPeeredGroup = Limit{Name: "Total private addresses for a group of peered virtual networks", Value: 128000, Kind: Hard,
		Per: "virtual network and the VNets peered with it", Source: networkLimits}
	LimitIPConfigsPerNIC = Limit{Name: "Private IP addresses per network interface", Value: maxIPConfigsPerNIC, Kind: Hard,
		Per: "network interface", Source: networkLimits}
	LimitIPConfigsPerASG = Limit{Name: "IP configurations per application security group", Value: 4000, Kind: Hard,
		Per: "application security group", Source: networkLimits}
	LimitPeeringsPerVNet = Limit{Name: "Virtual network peerings per virtual network", Value: 500, Kind: Hard,
		Per: "virtual network", Source: networkLimits}
	LimitSubnetsPerVNet = Limit{Name: "Subnets per virtual network", Value: 3000, Kind: Hard,
		Per: "virtual network", Source: networkLimits}
	LimitRulesPerNSG = Limit{Name: "NSG rules per NSG", Value: 1000, Kind: Hard,
		Per: "network security group", Source: networkLimits}
	LimitPrefixesPerNSG = Limit{Name: "IP addresses and ranges specified for source or destination in a security group", Value: 4000, Kind: Hard,
		Per: "network security group, sources and destinations apart", Source: networkLimits}
	LimitRoutesPerTable = Limit{Name: "User-defined routes per route table", Value: 400, Kind: Hard,
		Per: "route table", Source: networkLimits}
	LimitVNetsPerRegion = Limit{Name: "Virtual networks", Value: 1000, Kind: Hard,
		Per: "subscription and region", Source: networkLimits}
	LimitNICsPerRegion = Limit{Name: "Network interface cards", Value: 65536, Kind: Hard,
		Per: "subscription and region", Source: networkLimits}
	LimitNSGsPerRegion = Limit{Name: "Network Security Groups", Value: 5000, Kind: Hard,
		Per: "subscription and region", Source: networkLimits}
	LimitStandardPublicIPs = Limit{Name: "Standard Public IP addresses", Value: 10, Kind: Quota,
		Per: "subscription and region (1,000 on Enterprise Agreements)", Source: networkLimits}
	LimitNATPublicIPs = Limit{Name: "Public IP addresses per NAT gateway", Value: MaxNATPublicIPs, Kind: Hard,
		Per: "NAT gateway (64,512 SNAT ports each)", Source: natPage}
	LimitLoadBalancerBackends = Limit{Name: "Backend pool size (Standard Load Balancer)", Value: 5000, Kind: Hard,
		Per: "load balancer", Source: lbLimits}
	LimitScaleSetInstances = Limit{Name: "Maximum number of VMs in a scale set", Value: MaxScaleSetInstances, Kind: Hard,
		Per: "scale set with singlePlacementGroup=false and a gallery image", Source: scaleSetLimits}
	LimitPlacementGroupInstances = Limit{Name: "VMs in a single placement group", Value: MaxPlacementGroupInstances, Kind: Hard,
		Per: "scale set with singlePlacementGroup=true (InfiniBand)", Source: placementPage}
	LimitScaleSetsPerRegion = Limit{Name: "Maximum number of scale sets per subscription per region", Value: 2500, Kind: Hard,
		Per: "subscription and region", Source: scaleSetLimits}
	LimitVMsPerRegion = Limit{Name: "VMs per subscription", Value: 25000, Kind: Hard,
		Per: "subscription and region", Source: vmLimits}
	LimitRegionalVCPUs = Limit{Name: "Total regional vCPUs", Value: 20, Kind: Quota,
		Per: "subscription and region (350 on Enterprise Agreements); each VM family has its own quota too", Source: vmLimits}
	LimitManagedDisks = Limit{Name: "Managed disks", Value: 50000, Kind: Hard,
		Per: "subscription, region and disk type", Source: disksFAQ}
	// A scale set's reimage, upgrade and delete of instances charge one token per VM.
	LimitScaleSetVMUpdates = rateLimit("Update VMSS (reimage, upgrade instances), subscription bucket", ThrottleUpdateVMScaleSet)
	LimitScaleSetVMDeletes = rateLimit("Delete VMSS (delete instances), subscription bucket", ThrottleDeleteVMScaleSet)
)

func rateLimit(name string, p ThrottlePolicy) Limit {
	return Limit{Name: name, Value: int64(p.SubscriptionCapacity), Kind: Rate,
		Per: fmt.Sprintf("subscription and region, refilled %d a minute", int(p.SubscriptionRefill)), Source: computeRates}
}

// Limits lists every limit in the order the headroom table and the reference page show them.
var Limits = []*Limit{
	&LimitPrivateIPsPerVNet, &LimitPrivateIPsPerPeeredGroup, &LimitIPConfigsPerNIC, &LimitIPConfigsPerASG,
	&LimitPeeringsPerVNet, &LimitSubnetsPerVNet, &LimitRulesPerNSG, &LimitPrefixesPerNSG, &LimitRoutesPerTable,
	&LimitNATPublicIPs, &LimitLoadBalancerBackends, &LimitScaleSetInstances, &LimitPlacementGroupInstances,
	&LimitVNetsPerRegion, &LimitNSGsPerRegion, &LimitNICsPerRegion, &LimitScaleSetsPerRegion, &LimitVMsPerRegion,
	&LimitManagedDisks, &LimitStandardPublicIPs, &LimitRegionalVCPUs, &LimitScaleSetVMUpdates, &LimitScaleSetVMDeletes,
	&LimitHighCostScaleSetReads,
}

// ThrottlePolicy is one of Compute's or Resource Manager's throttling policies: a token bucket per
// resource and one per subscription and region, each refilled per minute up to its capacity.
type ThrottlePolicy struct {
	// Name is the policy as the x-ms-ratelimit-remaining-resource header names it.
	Name string
	// ResourceRefill and ResourceCapacity are per minute; 0 means the policy has no per-resource bucket.
	ResourceRefill, ResourceCapacity         float64
	SubscriptionRefill, SubscriptionCapacity float64
	// PerRequest: a request takes one token however many VMs it acts on (Resource Manager counts
	// requests; Compute counts the VMs of a batch).
	PerRequest bool
}

// Compute's policies for VMs, scale sets and scale-set VMs (computeRates), and Resource Manager's
// per-subscription buckets: 250 reads refilled at 25 a second, 200 writes and 200 deletes at 10
// (managerRates).
var (
	ThrottleUpdateVM               = ThrottlePolicy{Name: "UpdateVM", ResourceRefill: 4, ResourceCapacity: 12, SubscriptionRefill: 500, SubscriptionCapacity: 1500}
	ThrottleLowCostGetVM           = ThrottlePolicy{Name: "LowCostGetVM", ResourceRefill: 12, ResourceCapacity: 36, SubscriptionRefill: 8000, SubscriptionCapacity: 24000}
	ThrottleGetOperation           = ThrottlePolicy{Name: "GetOperation", ResourceRefill: 15, ResourceCapacity: 45, SubscriptionRefill: 5000, SubscriptionCapacity: 15000}
	ThrottleUpdateVMScaleSet       = ThrottlePolicy{Name: "UpdateVMScaleSet", ResourceRefill: 4, ResourceCapacity: 12, SubscriptionRefill: 500, SubscriptionCapacity: 1500}
	ThrottleDeleteVMScaleSet       = ThrottlePolicy{Name: "DeleteVMScaleSet", ResourceRefill: 4, ResourceCapacity: 12, SubscriptionRefill: 175, SubscriptionCapacity: 525}
	ThrottleLowCostGetVMScaleSet   = ThrottlePolicy{Name: "LowCostGetVMScaleSet", ResourceRefill: 12, ResourceCapacity: 36, SubscriptionRefill: 800, SubscriptionCapacity: 2400}
	ThrottleHighCostGetVMScaleSet  = ThrottlePolicy{Name: "HighCostGetVMScaleSet", ResourceRefill: 10, ResourceCapacity: 30, SubscriptionRefill: 360, SubscriptionCapacity: 1080}
	ThrottleUpdateVMScaleSetVMs    = ThrottlePolicy{Name: "UpdateVMScaleSetVMs", ResourceRefill: 4, ResourceCapacity: 12, SubscriptionRefill: 500, SubscriptionCapacity: 1500}
	ThrottleDeleteVMScaleSetVMs    = ThrottlePolicy{Name: "DeleteVMScaleSetVMs", ResourceRefill: 4, ResourceCapacity: 12, SubscriptionRefill: 500, SubscriptionCapacity: 1500}
	ThrottleGetVMScaleSetVMs       = ThrottlePolicy{Name: "GetVMScaleSetVMs", ResourceRefill: 12, ResourceCapacity: 36, SubscriptionRefill: 2000, SubscriptionCapacity: 6000}
	ThrottleResourceManagerReads   = ThrottlePolicy{Name: "SubscriptionReads", SubscriptionRefill: 25 * 60, SubscriptionCapacity: 250, PerRequest: true}
	ThrottleResourceManagerWrites  = ThrottlePolicy{Name: "SubscriptionWrites", SubscriptionRefill: 10 * 60, SubscriptionCapacity: 200, PerRequest: true}
	ThrottleResourceManagerDeletes = ThrottlePolicy{Name: "SubscriptionDeletes", SubscriptionRefill: 10 * 60, SubscriptionCapacity: 200, PerRequest: true}
)

// LimitUse is how much of one limit a plan takes at full size: targetNodes, every pool at maxNodes.
type LimitUse struct {
	Limit *Limit
	// Where names the instance closest to the limit: a VNet, a scale set, the subscription.
	Where string
	Use   int64
	// Field is the stack field that moves the use, and Fix what to do with it when over.
	Field, Fix string
}

// Share is the use as a fraction of the limit.
func (u LimitUse) Share() float64 { return float64(u.Use) / float64(u.Limit.Value) }

// Over reports a use past the limit.
func (u LimitUse) Over() bool { return u.Use > u.Limit.Value }

func (u LimitUse) problem() string {
	return fmt.Sprintf("%s at full size: %d, over Azure's %s of %d", u.Where, u.Use, u.Limit.Name, u.Limit.Value)
}

// Refusal is what a plan over a hard limit stops with, naming the field and the fix where one
// field moves the use.
func (u LimitUse) Refusal() error {
	if u.Field == "" {
		return fmt.Errorf("%s", u.problem())
	}
	return &FieldError{Field: u.Field, Problem: u.problem(), Fix: u.Fix}
}

// PoolField is the path of a field of pools[i].
func PoolField(i int, field string) string { return fmt.Sprintf("pools[%d].%s", i, field) }

// Worst keeps, of several instances of one limit, the one closest to it: the first of equals.
func Worst(uses ...LimitUse) LimitUse {
	return slices.MaxFunc(uses, func(a, b LimitUse) int { return int(a.Use - b.Use) })
}

// ControlPlaneMachines are the apiservers and every etcd member.
func (c *Cluster) ControlPlaneMachines() int {
	return c.APIServer.Count + c.EtcdMain.Members + c.EtcdEvents.Members
}

// machineCount is every VM of the cluster at full size.
func (c *Cluster) machineCount() int64 { return int64(c.TargetNodes) + int64(c.ControlPlaneMachines()) }

// controlPlaneAddresses are the control plane's machines and the load balancer's front end.
func (c *Cluster) controlPlaneAddresses() int64 { return int64(c.ControlPlaneMachines()) + 1 }

// HubGroup is the use of the peered-group limit by the cluster's hub at full size: the hub's own
// addresses in use (the largest any stack on it gives) and the VNets peered with it of this cluster
// and of every other on the same hub. Each may plan within its own group while together they pass
// the hub's.
func (c *Cluster) HubGroup(others []*Cluster) LimitUse {
	inUse, use, names := c.Network.Hub.AddressesInUse, c.hubPeeredAddresses(), []string{c.Name}
	for _, o := range others {
		if c.sharesHubWith(o) {
			inUse, use, names = max(inUse, o.Network.Hub.AddressesInUse), use+o.hubPeeredAddresses(), append(names, o.Name)
		}
	}
	slices.Sort(names)
	hub := c.HubVNet()
	return LimitUse{Limit: &LimitPrivateIPsPerPeeredGroup, Use: use + int64(inUse), Field: "network.hub.vnetId",
		Where: fmt.Sprintf("the hub %s/%s: its addresses in use and the VNets of %s peered with it", hub.ResourceGroup, hub.Names[0], strings.Join(names, ", ")),
		Fix:   "give a large cluster a hub of its own, or set network.hub.reachWorkers: false to peer only its control plane's VNet with the hub (docs/design/pod-network.md)"}
}

// hubPeeredAddresses are the addresses, at full size, of the cluster's VNets peered with its hub:
// the control plane's, and the worker VNets' when they reach it.
func (c *Cluster) hubPeeredAddresses() int64 {
	if c.ReachWorkers() {
		return c.vnetAddresses()
	}
	return c.controlPlaneAddresses()
}

// vnetAddresses are the addresses, at full size, of every VNet of the cluster.
func (c *Cluster) vnetAddresses() int64 {
	n := c.controlPlaneAddresses()
	for _, w := range c.WorkerVNets() {
		n += w.Addresses()
	}
	return n
}

// LimitUses is the stack's use of every limit its own fields decide, one row per limit: the
// instance closest to it. The Azure program adds the rows its design decides (azure.LimitUses).
func (c *Cluster) LimitUses() []LimitUse {
	// A worker VNet's peered group is every VNet of the cluster, and the hub when it reaches them.
	group := c.vnetAddresses()
	vnetUse := LimitUse{Limit: &LimitPrivateIPsPerVNet, Where: "VNet " + c.Name, Use: c.controlPlaneAddresses()}
	nic := LimitUse{Limit: &LimitIPConfigsPerNIC, Where: "no worker NIC"}
	natIPs := int64(c.NATPublicIPs(c.ControlPlaneMachines()))
	nat := LimitUse{Limit: &LimitNATPublicIPs, Where: "NAT gateway of VNet " + c.Name, Use: natIPs}
	for _, w := range c.WorkerVNets() {
		if w.Addresses() > vnetUse.Use {
			vnetUse = LimitUse{Limit: &LimitPrivateIPsPerVNet, Where: "VNet " + w.Name, Use: w.Addresses(), Field: PoolField(w.PoolIndex, "maxPods"),
				Fix: "a worker VNet holds its scale sets at full size: lower the pool's maxPods"}
		}
		ips := int64(c.NATPublicIPs(w.Nodes()))
		if natIPs += ips; ips > nat.Use {
			nat = LimitUse{Limit: &LimitNATPublicIPs, Where: "NAT gateway of VNet " + w.Name, Use: ips, Field: "kubelet.maxConcurrentDownloads",
				Fix: fmt.Sprintf("lower kubelet.maxConcurrentDownloads to %d, or leave it unset to size it from targetNodes",
					downloadsWithinSNAT(w.Nodes()))}
		}
	}
	// The control plane's VNet peers with the hub and every worker VNet: the hub's own always count.
	group += int64(c.Network.Hub.AddressesInUse)
	where := "every VNet of " + c.Name + " and the hub's addresses in use (network.hub.addressesInUse)"
	for i, p := range c.Pools {
		if use := int64(p.MaxPods) + 1; use > nic.Use {
			nic = LimitUse{Limit: &LimitIPConfigsPerNIC, Where: "a NIC of pool " + p.Name, Use: use, Field: PoolField(i, "maxPods"),
				Fix: fmt.Sprintf("lower pools[%d].maxPods to %d: a pod takes one of its node's IP configurations (L29)", i, maxPodsPerNode)}
		}
	}
	uses := []LimitUse{
		vnetUse,
		{Limit: &LimitPrivateIPsPerPeeredGroup, Where: where, Use: group, Field: "pools",
			Fix: "every node takes its pool's maxPods + 1 addresses in one peered group: lower the pools' maxPods or maxNodes, or split the fleet into clusters (docs/design/pod-network.md)"},
		nic, nat,
		{Limit: &LimitLoadBalancerBackends, Where: "the apiservers' load balancer", Use: int64(c.APIServer.Count), Field: "apiServer.count",
			Fix: "lower apiServer.count"},
		{Limit: &LimitNICsPerRegion, Where: "subscription, " + c.Location, Use: c.machineCount(), Field: "targetNodes",
			Fix: "split the fleet over clusters in several subscriptions or regions"},
		{Limit: &LimitVMsPerRegion, Where: "subscription, " + c.Location, Use: c.machineCount(), Field: "targetNodes",
			Fix: "split the fleet over clusters in several subscriptions or regions"},
		{Limit: &LimitScaleSetsPerRegion, Where: "subscription, " + c.Location, Use: int64(len(c.ScaleSets())), Field: "pools",
			Fix: "split the fleet over clusters in several subscriptions or regions"},
		{Limit: &LimitVNetsPerRegion, Where: "subscription, " + c.Location, Use: int64(1 + len(c.WorkerVNets())), Field: "pools",
			Fix: "split the fleet over clusters in several subscriptions or regions"},
		{Limit: &LimitStandardPublicIPs, Where: "subscription, " + c.Location, Use: natIPs, Field: "targetNodes",
			Fix: fmt.Sprintf("request a Standard Public IP addresses quota of %d in %s", natIPs, c.Location)},
		c.vCPUUse(),
	}
	sets := c.ScaleSets()
	for _, limit := range []*Limit{&LimitScaleSetInstances, &LimitPlacementGroupInstances} {
		var in []LimitUse
		for i, s := range sets {
			if s.SinglePlacementGroup == (limit == &LimitPlacementGroupInstances) {
				in = append(in, LimitUse{Limit: limit, Where: "scale set " + s.AzureName, Use: int64(s.MaxNodes),
					Field: fmt.Sprintf("pools[%d].maxNodes", slices.IndexFunc(c.Pools, func(p Pool) bool { return p.Name == sets[i].Pool.Name })),
					Fix:   "a pool is split into scale sets of at most this size"})
			}
		}
		if len(in) == 0 {
			in = append(in, LimitUse{Limit: limit, Where: "no scale set of this kind"})
		}
		uses = append(uses, Worst(in...))
	}
	batches := []LimitUse{{Limit: &LimitScaleSetVMUpdates, Where: "no pool"}}
	for i, p := range c.Pools {
		batches = append(batches, LimitUse{Limit: &LimitScaleSetVMUpdates, Where: "a worker roll's batch of pool " + p.Name,
			Use: int64(RollBatch(p.MaxNodes)), Field: PoolField(i, "maxNodes"),
			Fix: "batches past the bucket wait for its refill: the roll slows, nothing fails"})
	}
	deletes := LimitUse{Limit: &LimitScaleSetVMDeletes, Where: "cluster-autoscaler's scale-down", Use: int64(c.Autoscaler.MaxScaleDownParallelism),
		Field: "autoscaler.maxScaleDownParallelism", Fix: "deletes past the bucket wait for its refill: lower autoscaler.maxScaleDownParallelism"}
	return append(uses, Worst(batches...), deletes, c.AutoscalerReadUse())
}

// validateLimits refuses a stack over one of Azure's hard limits at full size: it could not
// reach its size, and would find out at scale-up time.
func (c *Cluster) validateLimits(v *validator) {
	v.between("network.hub.addressesInUse", int64(c.Network.Hub.AddressesInUse), 0, LimitPrivateIPsPerPeeredGroup.Value,
		"the hub's own addresses and its peers' that no stack beside this one describes, counted in one peered group's limit")
	for _, u := range c.LimitUses() {
		if u.Over() && u.Limit.Kind == Hard {
			v.fail(u.Field, u.Fix, "%s", u.problem())
		}
	}
}

// RollBatchPercent sizes a pool's batches after its canary: a twentieth of the pool at once
// keeps most capacity serving and a 2,500-node pool's roll within twenty-one batches.
const RollBatchPercent = 5

// RollBatch is how many of n machines a worker roll replaces at once after its canary.
func RollBatch(n int) int { return max(1, (n*RollBatchPercent+99)/100) }

// MachinesBySize counts the cluster's machines by VM size: every pool at maxNodes when full, else
// at nodes.
func (c *Cluster) MachinesBySize(full bool) map[string]int {
	bySize := map[string]int{}
	bySize[c.APIServer.VMSize] += c.APIServer.Count
	bySize[c.EtcdMain.VMSize] += c.EtcdMain.Members
	bySize[c.EtcdEvents.VMSize] += c.EtcdEvents.Members
	for _, p := range c.Pools {
		if full {
			bySize[p.VMSize] += p.MaxNodes
		} else {
			bySize[p.VMSize] += p.Nodes
		}
	}
	return bySize
}

// VCPUsBySize is the vCPUs of MachinesBySize. Azure's regional quota counts them all, and each
// size's family's quota its own.
func (c *Cluster) VCPUsBySize(full bool) map[string]int64 {
	out := map[string]int64{}
	for size, n := range c.MachinesBySize(full) {
		capacity, _ := VMCapacity(size)
		out[size] = int64(capacity.CPUs) * int64(n)
	}
	return out
}

// vCPUUse is the regional vCPUs the cluster needs at full size; the fix lists them by size, the
// requests the quota page takes.
func (c *Cluster) vCPUUse() LimitUse {
	bySize := c.VCPUsBySize(true)
	var total int64
	var parts []string
	for _, size := range slices.Sorted(maps.Keys(bySize)) {
		total += bySize[size]
		parts = append(parts, fmt.Sprintf("%d for %s", bySize[size], size))
	}
	return LimitUse{Limit: &LimitRegionalVCPUs, Where: "subscription, " + c.Location, Use: total, Field: "pools",
		Fix: fmt.Sprintf("request %d regional vCPUs in %s and each family's share: %s", total, c.Location, strings.Join(parts, ", "))}
}
