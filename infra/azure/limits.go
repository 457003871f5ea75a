package azure

import (
	"net/netip"

	"github.com/clusterforge/clusterforge/components/spec"
)

// LimitUses is the use of every Azure limit this program's design decides (one row per limit:
// the instance closest to it), beside the stack's own (spec.LimitUses), at full size.
func LimitUses(c *spec.Cluster) []spec.LimitUse {
	rules := InboundRules(c)
	var mostRules, mostPrefixes spec.LimitUse
	for _, role := range SubnetRoles {
		prefixes := 0
		for _, r := range rules[role] {
			for _, s := range r.Sources {
				if _, err := netip.ParsePrefix(s); err == nil {
					prefixes++
				}
			}
		}
		where := "NSG " + role
		if len(rules[role]) > int(mostRules.Use) {
			mostRules = spec.LimitUse{Limit: &spec.LimitRulesPerNSG, Where: where, Use: int64(len(rules[role]))}
		}
		if prefixes > int(mostPrefixes.Use) {
			mostPrefixes = spec.LimitUse{Limit: &spec.LimitPrefixesPerNSG, Where: where, Use: int64(prefixes)}
		}
	}
	nodes := int64(c.TargetNodes)
	pods := c.PodNetworkAddresses(c.TargetNodes) - nodes
	disks := int64(c.EtcdMain.Members + c.EtcdEvents.Members) // etcd VMs boot from a managed disk
	if !spec.HasLocalDisk(c.APIServer.VMSize) {
		disks += int64(c.APIServer.Count)
	}
	vnet := "VNet " + c.Name
	return []spec.LimitUse{
		{Limit: &spec.LimitIPConfigsPerASG, Where: "application security group " + GroupPods, Use: max(nodes, pods), Field: "targetNodes",
			Fix: "every pod's IP configuration is in one application security group: lower targetNodes or the pools' maxPods"},
		{Limit: &spec.LimitPeeringsPerVNet, Where: vnet, Use: 1},
		{Limit: &spec.LimitSubnetsPerVNet, Where: vnet, Use: int64(len(SubnetRoles))},
		mostRules, mostPrefixes,
		{Limit: &spec.LimitRoutesPerTable, Where: "no route table: pod addresses are the VNet's own (L29)", Use: 0},
		{Limit: &spec.LimitVNetsPerRegion, Where: "subscription, " + c.Location, Use: 1},
		{Limit: &spec.LimitNSGsPerRegion, Where: "subscription, " + c.Location, Use: int64(len(SubnetRoles))},
		{Limit: &spec.LimitManagedDisks, Where: "subscription, " + c.Location, Use: disks},
	}
}
