package spec

import (
	"fmt"
	"net/netip"
	"strings"
)

// Defaults of the fields that do not depend on the cluster's size.
const (
	DefaultLocation            = "eastus2"
	DefaultKubernetesVersion   = "v1.34.1"
	DefaultEtcdVersion         = "v3.6.4"
	DefaultPauseImage          = "registry.k8s.io/pause:3.10.1"
	DefaultContainerdVersion   = "v1.7.28"
	DefaultRuncVersion         = "v1.3.0"
	DefaultCrictlVersion       = "v1.34.0"
	DefaultAzureCNIVersion     = "v1.6.21"
	DefaultSchedulerPlugins    = "v0.33.5"
	DefaultCoreDNSVersion      = "v1.12.1"
	DefaultAutoscalerVersion   = "v1.34.0"
	DefaultPrometheusVersion   = "v3.5.0"
	DefaultNodeExporterVersion = "v1.9.1"
	// Autoscaler: a tight unready brake for fleets of thousands (cluster-autoscaler's own default is 45%).
	DefaultMaxUnreadyPercentage    = 10
	DefaultOkUnreadyCount          = 20
	DefaultScaleDownUnneededTime   = "10m"
	DefaultScaleDownDelayAfterAdd  = "10m"
	DefaultMaxScaleDownParallelism = 10
	DefaultMaxNodeProvisionTime    = "20m"
	DefaultMaxConcurrentDownloads  = 10 // L24: containerd's default is 3.
	// DefaultImagePullProgressTimeout cancels a pull that stalls, not one that is slow (L23).
	DefaultImagePullProgressTimeout = "5m"
	DefaultAdminUsername            = "clusteradmin"
	DefaultServiceCIDR              = "172.16.0.0/16"
	DefaultEtcdMainMembers          = 5 // L01: the largest clusters run five etcd members.
	DefaultAPIServerCount           = 5 // L01, L05: and five apiservers.
	DefaultMaxPods                  = 30
	DefaultMaxParallelImagePulls    = 10 // L20, matching containerd's max_concurrent_downloads (L24).
	DefaultAuditLogMaxBackup        = 10
	DefaultAuditLogMaxSizeMB        = 200
	DefaultEtcdCompactionInterval   = "5m"
	// PlaceholderImage is accepted by `make plan`; `pulumi up` refuses it.
	PlaceholderImage = "/subscriptions/00000000-0000-0000-0000-000000000000/resourceGroups/images/providers/Microsoft.Compute/galleries/clusterforge/images/worker/versions/0.0.0"
	// defaultVNetBase is where a derived address space starts.
	defaultVNetBase = "10.0.0.0"
	// minNodeSubnetBits keeps the derived VNet large enough for the control-plane and etcd /24s.
	minNodeSubnetBits = 10
	// azureReservedAddresses are the five addresses Azure keeps in every subnet.
	azureReservedAddresses = 5
)

// DefaultZones spreads machines over three availability zones.
var DefaultZones = []string{"1", "2", "3"}

// Default fills every field the stack left out: fixed defaults first, then sizing from
// TargetNodes. It never overrides a value the stack set, an explicit 0 or "" included (Validate
// judges those); for a Cluster built in Go rather than parsed, a zero value counts as unset.
func (c *Cluster) Default() {
	c.setDefault(&c.Location, DefaultLocation)
	c.setDefault(&c.Zones, append([]string(nil), DefaultZones...))
	c.setDefault(&c.Versions.Kubernetes, DefaultKubernetesVersion)
	c.setDefault(&c.Versions.Etcd, DefaultEtcdVersion)
	c.setDefault(&c.Versions.PauseImage, DefaultPauseImage)
	c.setDefault(&c.Versions.Containerd, DefaultContainerdVersion)
	c.setDefault(&c.Versions.Runc, DefaultRuncVersion)
	c.setDefault(&c.Versions.Crictl, DefaultCrictlVersion)
	c.setDefault(&c.Versions.AzureCNI, DefaultAzureCNIVersion)
	c.setDefault(&c.Versions.SchedulerPlugins, DefaultSchedulerPlugins)
	c.setDefault(&c.Versions.CoreDNS, DefaultCoreDNSVersion)
	c.setDefault(&c.Versions.ClusterAutoscaler, DefaultAutoscalerVersion)
	c.setDefault(&c.Versions.Prometheus, DefaultPrometheusVersion)
	c.setDefault(&c.Versions.NodeExporter, DefaultNodeExporterVersion)
	as := &c.Autoscaler
	c.setDefault(&as.MaxUnreadyPercentage, DefaultMaxUnreadyPercentage)
	c.setDefault(&as.OkUnreadyCount, DefaultOkUnreadyCount)
	c.setDefault(&as.ScaleDownUnneededTime, DefaultScaleDownUnneededTime)
	c.setDefault(&as.ScaleDownDelayAfterAdd, DefaultScaleDownDelayAfterAdd)
	c.setDefault(&as.MaxScaleDownParallelism, DefaultMaxScaleDownParallelism)
	c.setDefault(&as.MaxNodeProvisionTime, DefaultMaxNodeProvisionTime)
	c.setDefault(&c.Kubelet.MaxConcurrentDownloads, DefaultMaxConcurrentDownloads)
	c.setDefault(&c.Kubelet.ImagePullProgressTimeout, DefaultImagePullProgressTimeout)
	c.setDefault(&c.Image, PlaceholderImage)
	c.setDefault(&c.Admin.Username, DefaultAdminUsername)
	c.setDefault(&c.Kubelet.MaxPods, DefaultMaxPods)
	c.setDefault(&c.Kubelet.MaxParallelImagePulls, DefaultMaxParallelImagePulls)

	for i := range c.Pools {
		p := &c.Pools[i]
		c.setDefault(&p.MaxNodes, p.Nodes)
		c.setDefault(&p.Image, c.Image)
		if p.GPU == nil {
			gpu := vmSizes[p.VMSize].GPUs > 0
			p.GPU = &gpu
		}
		for j := range p.Taints {
			c.setDefault(&p.Taints[j].Effect, "NoSchedule")
		}
	}
	total := 0
	for _, p := range c.Pools {
		total += min(max(p.MaxNodes, 0), MaxClusterNodes+1) // saturating: Validate refuses what is out of range
	}
	c.setDefault(&c.TargetNodes, total)
	// Sizing reads a bounded count, so an absurd one cannot overflow the address plan.
	nodes := min(max(c.TargetNodes, 0), MaxClusterNodes)

	tier := tierFor(nodes)
	c.setDefault(&c.EtcdMain.Members, DefaultEtcdMainMembers)
	c.setDefault(&c.EtcdMain.VMSize, tier.etcdVMSize)
	c.setDefault(&c.EtcdMain.QuotaBackendBytes, tier.quotaBackendBytes)
	c.setDefault(&c.EtcdEvents.Members, tier.eventsMembers)
	c.setDefault(&c.EtcdEvents.VMSize, tier.eventsVMSize)
	c.setDefault(&c.EtcdEvents.QuotaBackendBytes, tier.eventsQuotaBytes)

	a := &c.APIServer
	c.setDefault(&a.Count, DefaultAPIServerCount)
	c.setDefault(&a.VMSize, tier.apiserverVMSize)
	c.setDefault(&a.MaxRequestsInflight, tier.maxRequestsInflight)
	c.setDefault(&a.MaxMutatingRequestsInflight, tier.maxMutatingRequestsInflight)
	c.setDefault(&a.AuditLogMaxBackup, DefaultAuditLogMaxBackup)
	c.setDefault(&a.AuditLogMaxSizeMB, DefaultAuditLogMaxSizeMB)
	c.setDefault(&a.EtcdCompactionInterval, DefaultEtcdCompactionInterval)

	c.setDefault(&c.DNS.Replicas, dnsReplicasFor(nodes))
	c.defaultNetwork(nodes)
}

// defaultNetwork derives the address plan: the node subnet (node + pod IPs, L29/L30) takes the
// upper half of the VNet, the control-plane and etcd /24s sit at its start.
func (c *Cluster) defaultNetwork(nodes int) {
	n := &c.Network
	c.setDefault(&n.ServiceCIDR, DefaultServiceCIDR)
	if n.AddressSpace == "" && !c.explicit[&n.AddressSpace] {
		need := addressesFor(nodes, min(max(c.Kubelet.MaxPods, 0), 250)) + azureReservedAddresses
		nodeBits := max(minNodeSubnetBits, bitsFor(need))
		base := netip.MustParseAddr(defaultVNetBase)
		n.AddressSpace = netip.PrefixFrom(base, 32-nodeBits-1).String()
		c.setDefault(&n.NodeSubnet, netip.PrefixFrom(addrAdd(base, 1<<nodeBits), 32-nodeBits).String())
	}
	vnet, err := netip.ParsePrefix(n.AddressSpace)
	if err != nil || !vnet.Addr().Is4() {
		return // Validate reports it.
	}
	base := vnet.Masked().Addr()
	c.setDefault(&n.ControlPlaneSubnet, netip.PrefixFrom(base, 24).String())
	c.setDefault(&n.EtcdSubnet, netip.PrefixFrom(addrAdd(base, 256), 24).String())
	if cp, err := netip.ParsePrefix(n.ControlPlaneSubnet); err == nil && cp.Addr().Is4() {
		c.setDefault(&n.APIServerIP, addrAdd(cp.Masked().Addr(), apiServerIPOffset).String())
	}
}

// setDefault sets *field (a pointer to a field of c) to value unless the stack set it or it is
// not zero.
func (c *Cluster) setDefault(field, value any) {
	if c.explicit[field] {
		return
	}
	switch f := field.(type) {
	case *string:
		if *f == "" {
			*f = value.(string)
		}
	case *int:
		if *f == 0 {
			*f = value.(int)
		}
	case *int64:
		if *f == 0 {
			*f = value.(int64)
		}
	case *[]string:
		if len(*f) == 0 {
			*f = value.([]string)
		}
	default:
		panic(fmt.Sprintf("spec: no default for %T", field))
	}
}

// addrAdd returns a + n for IPv4 addresses.
func addrAdd(a netip.Addr, n int) netip.Addr {
	b := a.As4()
	v := uint32(b[0])<<24 | uint32(b[1])<<16 | uint32(b[2])<<8 | uint32(b[3])
	v += uint32(n)
	return netip.AddrFrom4([4]byte{byte(v >> 24), byte(v >> 16), byte(v >> 8), byte(v)})
}

// IsPlaceholderImage reports whether an image id is the offline default that `pulumi up` refuses.
func IsPlaceholderImage(id string) bool {
	return strings.HasPrefix(id, "/subscriptions/00000000-0000-0000-0000-000000000000/")
}

// GiB shows a size in GiB for summaries.
func GiB(bytes int64) string { return fmt.Sprintf("%.1f GiB", float64(bytes)/float64(gib)) }
