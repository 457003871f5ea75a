package spec

import (
	"fmt"
	"net/netip"
	"regexp"
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

// gpuSize matches Azure's GPU families (NC, ND, NV, NG).
var gpuSize = regexp.MustCompile(`^Standard_N[CDVG]`)

// Default fills every empty field: fixed defaults first, then sizing from TargetNodes.
// It never overrides a value the stack set; Validate checks the result.
func (c *Cluster) Default() {
	setDefault(&c.Location, DefaultLocation)
	if len(c.Zones) == 0 {
		c.Zones = append([]string(nil), DefaultZones...)
	}
	setDefault(&c.Versions.Kubernetes, DefaultKubernetesVersion)
	setDefault(&c.Versions.Etcd, DefaultEtcdVersion)
	setDefault(&c.Versions.PauseImage, DefaultPauseImage)
	setDefault(&c.Versions.Containerd, DefaultContainerdVersion)
	setDefault(&c.Versions.Runc, DefaultRuncVersion)
	setDefault(&c.Versions.Crictl, DefaultCrictlVersion)
	setDefault(&c.Versions.AzureCNI, DefaultAzureCNIVersion)
	setDefault(&c.Versions.SchedulerPlugins, DefaultSchedulerPlugins)
	setDefault(&c.Versions.CoreDNS, DefaultCoreDNSVersion)
	setDefault(&c.Versions.ClusterAutoscaler, DefaultAutoscalerVersion)
	setDefault(&c.Versions.Prometheus, DefaultPrometheusVersion)
	setDefault(&c.Versions.NodeExporter, DefaultNodeExporterVersion)
	as := &c.Autoscaler
	setDefault(&as.MaxUnreadyPercentage, DefaultMaxUnreadyPercentage)
	setDefault(&as.OkUnreadyCount, DefaultOkUnreadyCount)
	setDefault(&as.ScaleDownUnneededTime, DefaultScaleDownUnneededTime)
	setDefault(&as.ScaleDownDelayAfterAdd, DefaultScaleDownDelayAfterAdd)
	setDefault(&as.MaxScaleDownParallelism, DefaultMaxScaleDownParallelism)
	setDefault(&as.MaxNodeProvisionTime, DefaultMaxNodeProvisionTime)
	setDefault(&c.Kubelet.MaxConcurrentDownloads, DefaultMaxConcurrentDownloads)
	setDefault(&c.Kubelet.ImagePullProgressTimeout, DefaultImagePullProgressTimeout)
	setDefault(&c.Image, PlaceholderImage)
	setDefault(&c.Admin.Username, DefaultAdminUsername)
	setDefault(&c.Kubelet.MaxPods, DefaultMaxPods)
	setDefault(&c.Kubelet.MaxParallelImagePulls, DefaultMaxParallelImagePulls)

	for i := range c.Pools {
		p := &c.Pools[i]
		setDefault(&p.MaxNodes, p.Nodes)
		setDefault(&p.Image, c.Image)
		if p.GPU == nil {
			gpu := gpuSize.MatchString(p.VMSize)
			p.GPU = &gpu
		}
		for j := range p.Taints {
			setDefault(&p.Taints[j].Effect, "NoSchedule")
		}
	}
	if c.TargetNodes == 0 {
		for _, p := range c.Pools {
			c.TargetNodes += p.MaxNodes
		}
	}

	tier := tierFor(c.TargetNodes)
	setDefault(&c.EtcdMain.Members, DefaultEtcdMainMembers)
	setDefault(&c.EtcdMain.VMSize, tier.etcdVMSize)
	setDefault(&c.EtcdMain.QuotaBackendBytes, tier.quotaBackendBytes)
	setDefault(&c.EtcdEvents.Members, tier.eventsMembers)
	setDefault(&c.EtcdEvents.VMSize, tier.eventsVMSize)
	setDefault(&c.EtcdEvents.QuotaBackendBytes, tier.eventsQuotaBytes)

	a := &c.APIServer
	setDefault(&a.Count, DefaultAPIServerCount)
	setDefault(&a.VMSize, tier.apiserverVMSize)
	setDefault(&a.MaxRequestsInflight, tier.maxRequestsInflight)
	setDefault(&a.MaxMutatingRequestsInflight, tier.maxMutatingRequestsInflight)
	setDefault(&a.AuditLogMaxBackup, DefaultAuditLogMaxBackup)
	setDefault(&a.AuditLogMaxSizeMB, DefaultAuditLogMaxSizeMB)
	setDefault(&a.EtcdCompactionInterval, DefaultEtcdCompactionInterval)

	setDefault(&c.DNS.Replicas, dnsReplicasFor(c.TargetNodes))
	c.defaultNetwork()
}

// defaultNetwork derives the address plan: the node subnet (node + pod IPs, L29/L30) takes the
// upper half of the VNet, the control-plane and etcd /24s sit at its start.
func (c *Cluster) defaultNetwork() {
	n := &c.Network
	setDefault(&n.ServiceCIDR, DefaultServiceCIDR)
	if n.AddressSpace == "" {
		need := addressesFor(c.TargetNodes, c.Kubelet.MaxPods) + azureReservedAddresses
		nodeBits := max(minNodeSubnetBits, bitsFor(need))
		base := netip.MustParseAddr(defaultVNetBase)
		n.AddressSpace = netip.PrefixFrom(base, 32-nodeBits-1).String()
		setDefault(&n.NodeSubnet, netip.PrefixFrom(addrAdd(base, 1<<nodeBits), 32-nodeBits).String())
	}
	vnet, err := netip.ParsePrefix(n.AddressSpace)
	if err != nil || !vnet.Addr().Is4() {
		return // Validate reports it.
	}
	base := vnet.Masked().Addr()
	setDefault(&n.ControlPlaneSubnet, netip.PrefixFrom(base, 24).String())
	setDefault(&n.EtcdSubnet, netip.PrefixFrom(addrAdd(base, 256), 24).String())
	if cp, err := netip.ParsePrefix(n.ControlPlaneSubnet); err == nil && cp.Addr().Is4() {
		setDefault(&n.APIServerIP, addrAdd(cp.Masked().Addr(), apiServerIPOffset).String())
	}
}

func setDefault[T comparable](field *T, value T) {
	var zero T
	if *field == zero {
		*field = value
	}
}

// addrAdd returns a + n for IPv4 addresses.
func addrAdd(a netip.Addr, n int) netip.Addr {
	b := a.As4()
	v := uint32(b[0])<<24 | uint32(b[1])<<16 | uint32(b[2])<<8 | uint32(b[3])
	v += uint32(n)
	return netip.AddrFrom4([4]byte{byte(v >> 24), byte(v >> 16), byte(v >> 8), byte(v)})
}

// GiB shows a size in GiB for summaries.
func GiB(bytes int64) string { return fmt.Sprintf("%.1f GiB", float64(bytes)/float64(gib)) }
