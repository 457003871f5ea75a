package spec

import (
	"fmt"
	"net/netip"
	"slices"
)

// Azure keeps the first four and the last address of every subnet (network, gateway, two DNS,
// broadcast); its smallest subnet is a /29.
const (
	subnetReservedHead = 4
	minSubnetBits      = 29
)

// privateRanges are where a VNet, the hub and the service range may live: RFC 1918 and the
// shared address space Azure allows. Anything else would shadow internet hosts, and Azure refuses
// its own (168.63.129.16, 169.254.0.0/16) and loopback and multicast in a VNet.
var privateRanges = []netip.Prefix{
	netip.MustParsePrefix("10.0.0.0/8"), netip.MustParsePrefix("172.16.0.0/12"),
	netip.MustParsePrefix("192.168.0.0/16"), netip.MustParsePrefix("100.64.0.0/10"),
}

// Service range limits: kube-apiserver refuses an IPv4 range larger than a /12; a /24 leaves room
// for 256 Services, the add-ons' and the workloads', and holds the DNS address (the tenth).
const (
	maxServiceRangeBits = 20
	minServiceRangeBits = 8
)

// prefix parses one CIDR field, reporting it if malformed.
func (v *validator) prefix(field, value string) (netip.Prefix, bool) {
	p, err := netip.ParsePrefix(value)
	if err != nil || !p.Addr().Is4() {
		v.fail(field, "write an IPv4 CIDR such as 10.0.0.0/16", "%s is not an IPv4 CIDR", Excerpt(value))
		return netip.Prefix{}, false
	}
	if p.Masked() != p {
		v.fail(field, fmt.Sprintf("write it as %s", p.Masked()), "%s has host bits set", value)
		return netip.Prefix{}, false
	}
	if !slices.ContainsFunc(privateRanges, func(r netip.Prefix) bool { return contains(r, p) }) {
		v.fail(field, "use a private range: 10.0.0.0/8, 172.16.0.0/12, 192.168.0.0/16 or 100.64.0.0/10", "%s is not a private range", value)
		return netip.Prefix{}, false
	}
	return p, true
}

func (c *Cluster) validateNetwork(v *validator) {
	n := c.Network
	type named struct {
		field  string
		prefix netip.Prefix
	}
	var all []named
	for _, f := range []struct{ field, value string }{
		{"network.addressSpace", n.AddressSpace},
		{"network.controlPlaneSubnet", n.ControlPlaneSubnet},
		{"network.etcdSubnet", n.EtcdSubnet},
		{"network.serviceCIDR", n.ServiceCIDR},
		{"network.hub.addressSpace", n.Hub.AddressSpace},
	} {
		if p, ok := v.prefix(f.field, f.value); ok {
			all = append(all, named{f.field, p})
		}
	}
	var workers []named
	for i, p := range c.Pools {
		for k, s := range p.VNets {
			field := fmt.Sprintf("%s[%d]", poolVNetsPath(i), k)
			if pfx, ok := v.prefix(field, s); ok {
				workers = append(workers, named{field, pfx})
				if pfx.Bits() > workerVNetBits {
					v.fail(field, fmt.Sprintf("use a /%d or larger: a worker VNet holds its scale sets at full size", workerVNetBits), "%s is too small", pfx)
				}
			}
		}
		// More is allowed: a pool that shrank keeps the VNets it had, empty, as no VNet in use may go.
		if given := len(p.VNets); given < p.VNetsNeeded() {
			v.fail(poolVNetsPath(i), "run make freeze: it adds the VNets a grown pool needs", "%d VNets for %d scale sets that take %d", given, p.scaleSetCount(), p.VNetsNeeded())
		}
	}
	if len(all) < 5 {
		return // Malformed CIDRs are reported; their relations cannot be checked.
	}
	vnet, subnets, service, hub := all[0], all[1:3], all[3], all[4]
	for i, s := range subnets {
		if !contains(vnet.prefix, s.prefix) {
			v.fail(s.field, fmt.Sprintf("place it inside network.addressSpace %s", vnet.prefix), "%s is outside the VNet", s.prefix)
		}
		if s.prefix.Bits() > minSubnetBits {
			v.fail(s.field, "use a /29 or larger: Azure's smallest subnet", "%s is too small", s.prefix)
		}
		for _, o := range subnets[i+1:] {
			if s.prefix.Overlaps(o.prefix) {
				v.fail(o.field, fmt.Sprintf("move it off %s (%s)", s.field, s.prefix), "%s overlaps another subnet", o.prefix)
			}
		}
	}
	// Every VNet of the cluster, the hub and the service range are apart: peering joins them all.
	spaces := append([]named{vnet}, workers...)
	for i, s := range spaces {
		for _, o := range spaces[i+1:] {
			if s.prefix.Overlaps(o.prefix) {
				v.fail(o.field, fmt.Sprintf("move it off %s (%s)", s.field, s.prefix), "%s overlaps another VNet of the cluster", o.prefix)
			}
		}
		for _, outside := range []named{service, hub} {
			if outside.prefix.Overlaps(s.prefix) {
				v.fail(outside.field, fmt.Sprintf("pick a range that does not overlap %s %s", s.field, s.prefix), "%s overlaps a VNet of the cluster", outside.prefix)
			}
		}
	}
	if service.prefix.Overlaps(hub.prefix) {
		v.fail(service.field, fmt.Sprintf("pick a range that does not overlap the hub %s", hub.prefix), "%s overlaps the hub", service.prefix)
	}
	if bits := 32 - service.prefix.Bits(); bits < minServiceRangeBits || bits > maxServiceRangeBits {
		v.fail(service.field, "use a /12 to a /24: kube-apiserver refuses more than a /12, and a /24 is 256 Services with the DNS address",
			"%s is out of range", service.prefix)
	}

	etcd := subnets[1].prefix
	lastMain, lastEvents := int64(etcdMainIPOffset+c.EtcdMain.Members-1), int64(etcdEventsIPOffset+c.EtcdEvents.Members-1)
	if lastMain >= etcdEventsIPOffset || lastEvents > size(etcd)-2 {
		v.fail("network.etcdSubnet", "use a /26 or larger", "%s cannot hold the etcd members' static addresses (.%d to .%d), short of its last address",
			etcd, etcdMainIPOffset, lastEvents)
	}
	cp := subnets[0].prefix
	if need := int64(c.APIServer.Count) + 1 + azureReservedAddresses; size(cp) < need {
		v.fail("network.controlPlaneSubnet", fmt.Sprintf("use a /%d or larger", 32-bitsFor(need)),
			"%s cannot hold %d apiservers and the load balancer's address", cp, c.APIServer.Count)
	}
	ip, err := netip.ParseAddr(n.APIServerIP)
	if err != nil || !cp.Contains(ip) {
		v.fail("network.apiServerIP", fmt.Sprintf("pick an address inside network.controlPlaneSubnet %s", cp), "%s is not in the control-plane subnet", Excerpt(n.APIServerIP))
	} else if off := addrOffset(cp, ip); off < subnetReservedHead || off > size(cp)-2 {
		v.fail("network.apiServerIP", fmt.Sprintf("pick an address of %s past its first four and before its last: Azure keeps those", cp), "%s is reserved by Azure", ip)
	}
}

func contains(outer, inner netip.Prefix) bool {
	return outer.Bits() <= inner.Bits() && outer.Contains(inner.Addr())
}

func size(p netip.Prefix) int64 { return int64(1) << (32 - p.Bits()) }

// bitsFor is the number of host bits that hold n addresses.
func bitsFor(n int64) int {
	b := 0
	for int64(1)<<b < n && b < 32 {
		b++
	}
	return b
}

func addrOffset(p netip.Prefix, ip netip.Addr) int64 {
	a, b := p.Masked().Addr().As4(), ip.As4()
	return int64(uint32(b[0])<<24|uint32(b[1])<<16|uint32(b[2])<<8|uint32(b[3])) -
		int64(uint32(a[0])<<24|uint32(a[1])<<16|uint32(a[2])<<8|uint32(a[3]))
}
