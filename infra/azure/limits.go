package azure

import (
	"net/netip"
	"slices"

	"github.com/clusterforge/clusterforge/components/spec"
)

// LimitUses is the use of every Azure limit this program's design decides (one row per limit:
// the instance closest to it), beside the stack's own (spec.LimitUses), at full size.
func LimitUses(c *spec.Cluster) []spec.LimitUse {
	var mostRules, mostPrefixes spec.LimitUse
	for key, rules := range InboundRules(c) {
		prefixes := 0
		for _, r := range rules {
			for _, s := range r.Sources {
				if _, err := netip.ParsePrefix(s); err == nil {
					prefixes++
				}
			}
		}
		where := "NSG " + key
		if len(rules) > int(mostRules.Use) || len(rules) == int(mostRules.Use) && where < mostRules.Where {
			mostRules = spec.LimitUse{Limit: &spec.LimitRulesPerNSG, Where: where, Use: int64(len(rules))}
		}
		if prefixes > int(mostPrefixes.Use) || prefixes == int(mostPrefixes.Use) && where < mostPrefixes.Where {
			mostPrefixes = spec.LimitUse{Limit: &spec.LimitPrefixesPerNSG, Where: where, Use: int64(prefixes)}
		}
	}
	workers := c.WorkerVNets()
	group := spec.LimitUse{Limit: &spec.LimitIPConfigsPerASG, Where: "no worker VNet"}
	for _, w := range workers {
		if int64(w.Nodes()) > group.Use {
			i := slices.IndexFunc(c.Pools, func(p spec.Pool) bool { return p.Name == w.Pool.Name })
			group = spec.LimitUse{Limit: &spec.LimitIPConfigsPerASG, Where: "nodes group of VNet " + w.Name, Use: int64(w.Nodes()),
				Field: spec.PoolField(i, "maxNodes"), Fix: "a worker VNet takes at most as many nodes as its nodes group holds"}
		}
	}
	// The control plane's VNet peers with every worker VNet and the hub: one more than any worker
	// VNet, which peers with the others, the control plane's and at most the hub.
	peerings := int64(len(workers) + 1)
	disks := int64(c.EtcdMain.Members + c.EtcdEvents.Members) // etcd VMs boot from a managed disk
	if !spec.HasLocalDisk(c.APIServer.VMSize) {
		disks += int64(c.APIServer.Count)
	}
	region := "subscription, " + c.Location
	return []spec.LimitUse{
		group,
		{Limit: &spec.LimitPeeringsPerVNet, Where: "VNet " + c.Name + " (the control plane's)", Use: peerings},
		{Limit: &spec.LimitSubnetsPerVNet, Where: "VNet " + c.Name + " (the control plane's)", Use: int64(len(ControlPlaneSubnets))},
		mostRules, mostPrefixes,
		{Limit: &spec.LimitRoutesPerTable, Where: "no route table: pod addresses are the VNet's own (L29)", Use: 0},
		{Limit: &spec.LimitNSGsPerRegion, Where: region, Use: int64(len(ControlPlaneSubnets) + len(workers))},
		{Limit: &spec.LimitManagedDisks, Where: region, Use: disks},
	}
}
