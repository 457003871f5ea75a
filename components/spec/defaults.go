package spec

import (
	"fmt"
	"math/bits"

	"net/netip"
	"strings"

	"github.com/clusterforge/clusterforge/components/wellknown"
)

// Defaults of the fields that do not depend on the cluster's size.
const (
	DefaultLocation = "eastus2"
	// Autoscaler: a tight unready brake for fleets of thousands (cluster-autoscaler's own default is 45%).
	DefaultMaxUnreadyPercentage    = 10
	DefaultOkUnreadyCount          = 20
	DefaultScaleDownUnneededTime   = "10m"
	DefaultScaleDownDelayAfterAdd  = "10m"
	DefaultMaxScaleDownParallelism = 10
	DefaultMaxNodeProvisionTime    = "20m"
	DefaultJoinPause               = "30s"
	DefaultJoinJitter              = "30s"
	// DefaultMaxConcurrentDownloads is a node's layer downloads at once, shared by its parallel
	// pulls (L24; containerd's default is 3); fleets past 39,000 nodes get fewer (downloadsWithinSNAT).
	DefaultMaxConcurrentDownloads = 10
	// DefaultImagePullProgressTimeout cancels a pull that stalls, not one that is slow (L23).
	DefaultImagePullProgressTimeout = "5m"
	DefaultAdminUsername            = "clusteradmin"
	DefaultServiceCIDR              = "172.16.0.0/16"
	DefaultEtcdMainMembers          = 5 // L01: the largest clusters run five etcd members.
	DefaultAPIServerCount           = 5 // L01, L05: and five apiservers.
	DefaultMaxPods                  = 30
	// DefaultPodPidsLimit leaves a training pod thousands of data-loader processes and threads.
	DefaultPodPidsLimit = 32768
	// DefaultMaxParallelImagePulls lets one large pull not block the rest (L20).
	DefaultMaxParallelImagePulls  = 10
	DefaultAuditLogMaxBackup      = 10
	DefaultAuditLogMaxSizeMB      = 200
	DefaultEtcdCompactionInterval = "5m"
	DefaultBackupInterval         = "3m"
	// placeholderGallery holds the placeholder images `make plan` accepts and `pulumi up` refuses.
	placeholderGallery = "/subscriptions/00000000-0000-0000-0000-000000000000/resourceGroups/images/providers/Microsoft.Compute/galleries/clusterforge/images/"
	// azureReservedAddresses are the five addresses Azure keeps in every subnet.
	azureReservedAddresses = 5
)

// DefaultTeamQuota is a team namespace's quota where the stack names none: room for a team
// running thousands of nodes' pods, far below what fills etcd-main, and no NodePort or
// LoadBalancer Service (nothing in the cluster makes an Azure load balancer for one). It counts
// every kind a team's edit role may create but Events (QuotaUncounted), and the kinds the
// controllers write from what a team wrote: a StatefulSet's revisions, a Service's slices.
var DefaultTeamQuota = map[string]string{
	// pods counts those not finished; count/pods every pod etcd holds (a finalizer keeps a deleted one).
	"pods": "20000", "count/pods": "20000",
	"count/jobs.batch": "5000", "services": "500", "configmaps": "1500", "secrets": "1500",
	"count/controllerrevisions.apps": "500", "count/endpointslices.discovery.k8s.io": "1000",
	"persistentvolumeclaims": "500", "count/serviceaccounts": "200", "services.nodeports": "0", "services.loadbalancers": "0",
	// Gangs (L16): a PodGroup each, and the Workloads that template them.
	"count/podgroups." + wellknown.SchedulingGroup: "2000", "count/workloads." + wellknown.SchedulingGroup: "500",
	// Ten ReplicaSets kept per Deployment.
	"count/deployments.apps": "500", "count/replicasets.apps": "5000", "count/statefulsets.apps": "500",
	"count/cronjobs.batch": "500", "count/horizontalpodautoscalers.autoscaling": "200", "count/poddisruptionbudgets.policy": "500",
	"count/leases.coordination.k8s.io": "500", "count/networkpolicies.networking.k8s.io": "200", "count/ingresses.networking.k8s.io": "100",
	"count/resourceclaims.resource.k8s.io": "2000", "count/resourceclaimtemplates.resource.k8s.io": "500",
	// A DaemonSet's pods choose their nodes, which a team's pods may not; ReplicationControllers
	// are Deployments' predecessor.
	"count/daemonsets.apps": "0", "count/replicationcontrollers": "0",
}

// A team's largest objects: a pod or a workload's template with a long environment fits in 32 KiB
// (the apiservers' own cap is 1.5 MiB, etcd's request limit); a model's or a job's configuration
// in a 256 KiB ConfigMap. With DefaultTeamQuota's counts a team's Footprint stays within
// MaxFootprintShare of the smallest stack's etcd-main.
const (
	DefaultTeamMaxObjectBytes     = 32 << 10
	DefaultTeamMaxDataObjectBytes = 256 << 10
)

// QuotaUncounted are the kinds a team's edit role may create that its quota leaves out: Events
// live in etcd-events (L03), an hour each, capped per namespace by the apiservers' EventRateLimit;
// counting them would make every event a write of the quota's status in etcd-main.
var QuotaUncounted = []string{"count/events", "count/events.events.k8s.io"}

// DefaultZones spreads machines over three availability zones.
var DefaultZones = []string{"1", "2", "3"}

// Default fills every field the stack left out: fixed defaults first, then sizing from
// TargetNodes. It never overrides a value the stack set, an explicit 0 or "" included (Validate
// judges those); for a Cluster built in Go rather than parsed, a zero value counts as unset.
func (c *Cluster) Default() {
	setDefault(c.explicit, &c.Location, DefaultLocation)
	if len(c.Zones) == 0 && !c.explicit[&c.Zones] {
		c.Zones = append([]string(nil), DefaultZones...)
	}
	setDefault(c.explicit, &c.Versions.Kubernetes, DefaultKubernetesVersion)
	setDefault(c.explicit, &c.Versions.Kubelet, c.Versions.Kubernetes)
	setDefault(c.explicit, &c.Versions.Etcd, DefaultEtcdVersion)
	setDefault(c.explicit, &c.Versions.PauseImage, DefaultPauseImage)
	setDefault(c.explicit, &c.Versions.Containerd, DefaultContainerdVersion)
	setDefault(c.explicit, &c.Versions.Runc, DefaultRuncVersion)
	setDefault(c.explicit, &c.Versions.Crictl, DefaultCrictlVersion)
	setDefault(c.explicit, &c.Versions.AzureCNI, DefaultAzureCNIVersion)
	setDefault(c.explicit, &c.Versions.CoreDNS, DefaultCoreDNSVersion)
	setDefault(c.explicit, &c.Versions.ClusterAutoscaler, DefaultAutoscalerVersion)
	setDefault(c.explicit, &c.Versions.Prometheus, DefaultPrometheusVersion)
	setDefault(c.explicit, &c.Versions.NodeExporter, DefaultNodeExporterVersion)
	setDefault(c.explicit, &c.Versions.NodeProblemDetector, DefaultNodeProblemDetector)
	setDefault(c.explicit, &c.Versions.NvidiaDevicePlugin, DefaultNvidiaDevicePlugin)
	as := &c.Autoscaler
	setDefault(c.explicit, &as.MaxUnreadyPercentage, DefaultMaxUnreadyPercentage)
	setDefault(c.explicit, &as.OkUnreadyCount, DefaultOkUnreadyCount)
	setDefault(c.explicit, &as.ScaleDownUnneededTime, DefaultScaleDownUnneededTime)
	setDefault(c.explicit, &as.ScaleDownDelayAfterAdd, DefaultScaleDownDelayAfterAdd)
	setDefault(c.explicit, &as.MaxScaleDownParallelism, DefaultMaxScaleDownParallelism)
	setDefault(c.explicit, &as.MaxNodeProvisionTime, DefaultMaxNodeProvisionTime)
	setDefault(c.explicit, &c.Kubelet.ImagePullProgressTimeout, DefaultImagePullProgressTimeout)
	for _, g := range GalleryImages {
		setDefault(c.explicit, g.Version(c), PlaceholderImage(g.Definition))
	}
	setDefault(c.explicit, &c.Admin.Username, DefaultAdminUsername)
	setDefault(c.explicit, &c.Kubelet.MaxPods, DefaultMaxPods)
	setDefault(c.explicit, &c.Kubelet.PodPidsLimit, DefaultPodPidsLimit)

	for i := range c.Pools {
		p := &c.Pools[i]
		setDefault(c.explicit, &p.MaxNodes, p.Nodes)
		setDefault(c.explicit, &p.MaxPods, c.Kubelet.MaxPods)
		if p.GPU == nil {
			gpu := vmSizes[p.VMSize].GPUs > 0
			p.GPU = &gpu
		}
		if p.IsGPU() {
			setDefault(c.explicit, &p.Image, c.GPUImage)
		} else {
			setDefault(c.explicit, &p.Image, c.Image)
		}
		for j := range p.Taints {
			setDefault(c.explicit, &p.Taints[j].Effect, "NoSchedule")
		}
	}
	total := 0
	for _, p := range c.Pools {
		total += min(max(p.MaxNodes, 0), MaxClusterNodes+1) // saturating: Validate refuses what is out of range
	}
	setDefault(c.explicit, &c.TargetNodes, total)
	// Sizing reads a bounded count, so an absurd one cannot overflow the address plan.
	nodes := min(max(c.TargetNodes, 0), MaxClusterNodes)

	tier := tierFor(nodes)
	setDefault(c.explicit, &c.EtcdMain.Members, DefaultEtcdMainMembers)
	setDefault(c.explicit, &c.EtcdMain.VMSize, tier.etcdVMSize)
	setDefault(c.explicit, &c.EtcdMain.QuotaBackendBytes, tier.quotaBackendBytes)
	setDefault(c.explicit, &c.EtcdEvents.Members, tier.eventsMembers)
	setDefault(c.explicit, &c.EtcdEvents.VMSize, tier.eventsVMSize)
	setDefault(c.explicit, &c.EtcdEvents.QuotaBackendBytes, tier.eventsQuotaBytes)
	setDefault(c.explicit, &c.Backup.Interval, DefaultBackupInterval)

	a := &c.APIServer
	setDefault(c.explicit, &a.Count, DefaultAPIServerCount)
	setDefault(c.explicit, &a.VMSize, tier.apiserverVMSize)
	setDefault(c.explicit, &a.MaxRequestsInflight, tier.maxRequestsInflight)
	setDefault(c.explicit, &a.MaxMutatingRequestsInflight, tier.maxMutatingRequestsInflight)
	setDefault(c.explicit, &a.AuditLogMaxBackup, DefaultAuditLogMaxBackup)
	setDefault(c.explicit, &a.AuditLogMaxSizeMB, DefaultAuditLogMaxSizeMB)
	setDefault(c.explicit, &a.EtcdCompactionInterval, DefaultEtcdCompactionInterval)
	setDefault(c.explicit, &c.Joins.Step, joinStepFor(min(max(a.Count, 1), MaxAPIServers), min(max(a.MaxMutatingRequestsInflight, 1), 20000)))
	setDefault(c.explicit, &c.Joins.Pause, DefaultJoinPause)
	if c.Teams.Quota == nil {
		c.Teams.Quota = map[string]string{}
	}
	for name, hard := range DefaultTeamQuota {
		if _, given := c.Teams.Quota[name]; !given {
			c.Teams.Quota[name] = hard
		}
	}
	setDefault(c.explicit, &c.Joins.Jitter, DefaultJoinJitter)
	setDefault(c.explicit, &c.Teams.MaxObjectBytes, DefaultTeamMaxObjectBytes)
	setDefault(c.explicit, &c.Teams.MaxDataObjectBytes, DefaultTeamMaxDataObjectBytes)

	setDefault(c.explicit, &c.DNS.Replicas, dnsReplicasFor(nodes))
	setDefault(c.explicit, &c.Kubelet.MaxParallelImagePulls, DefaultMaxParallelImagePulls)
	setDefault(c.explicit, &c.Kubelet.MaxConcurrentDownloads, downloadsWithinSNAT(nodes))
	setDefault(c.explicit, &c.Network.ServiceCIDR, DefaultServiceCIDR)
	c.placeNetwork(c.outsideTaken())
}

// placeNetwork derives every address the stack left out, clear of taken (the hub, the service
// range, and in make freeze every cluster peered with the same hub): the control plane's VNet,
// the first free /23 of 10.0.0.0/8, holds the control-plane and etcd /24s; each pool's worker
// VNets are the next free /16s, as many as its scale sets need, after those the stack gives.
func (c *Cluster) placeNetwork(taken []netip.Prefix) {
	n := &c.Network
	for _, f := range c.frozenFields() {
		if s, ok := f.ptr.(*string); ok && strings.HasPrefix(f.path, "network.") && f.path != "network.serviceCIDR" && !c.explicit[f.ptr] {
			*s = ""
		}
	}
	if len(c.givenVNets) != len(c.Pools) {
		c.givenVNets = nil
		for i := range c.Pools {
			given := 0
			if c.explicit[&c.Pools[i].VNets] {
				given = len(c.Pools[i].VNets)
			}
			c.givenVNets = append(c.givenVNets, given)
		}
	}
	for i := range c.Pools {
		c.Pools[i].VNets = c.Pools[i].VNets[:c.givenVNets[i]]
	}
	for _, s := range append([]string{n.AddressSpace}, c.givenVNetPrefixes()...) {
		if p, err := netip.ParsePrefix(s); err == nil {
			taken = append(taken, p.Masked())
		}
	}
	if n.AddressSpace == "" {
		block, ok := freeBlock(controlPlaneVNetBits, taken)
		if !ok {
			return // Validate reports the empty address space.
		}
		n.AddressSpace, taken = block.String(), append(taken, block)
	}
	vnet, err := netip.ParsePrefix(n.AddressSpace)
	if err != nil || !vnet.Addr().Is4() {
		return // Validate reports it.
	}
	base := vnet.Masked().Addr()
	setDefault(c.explicit, &n.ControlPlaneSubnet, netip.PrefixFrom(base, 24).String())
	setDefault(c.explicit, &n.EtcdSubnet, netip.PrefixFrom(addrAdd(base, 256), 24).String())
	if cp, err := netip.ParsePrefix(n.ControlPlaneSubnet); err == nil && cp.Addr().Is4() {
		setDefault(c.explicit, &n.APIServerIP, addrAdd(cp.Masked().Addr(), apiServerIPOffset).String())
	}
	for i := range c.Pools {
		p := &c.Pools[i]
		for len(p.VNets) < p.VNetsNeeded() {
			block, ok := freeBlock(workerVNetBits, taken)
			if !ok {
				break // Validate reports the pool short of VNets.
			}
			p.VNets, taken = append(p.VNets, block.String()), append(taken, block)
		}
	}
}

// The derived sizes: the control plane's VNet holds its two /24s, a worker VNet the most
// addresses one VNet may hold (a /16).
const controlPlaneVNetBits = 23

var workerVNetBits = 32 - bits.Len(privateIPsPerVNet-1)

// givenVNetPrefixes are the worker VNets the stack gives.
func (c *Cluster) givenVNetPrefixes() []string {
	var out []string
	for i, p := range c.Pools {
		out = append(out, p.VNets[:c.givenVNets[i]]...)
	}
	return out
}

// outsideTaken are the ranges no VNet of the cluster may take: the hub's and the service range.
func (c *Cluster) outsideTaken() []netip.Prefix {
	var out []netip.Prefix
	for _, s := range []string{c.Network.Hub.AddressSpace, c.Network.ServiceCIDR} {
		if p, err := netip.ParsePrefix(s); err == nil {
			out = append(out, p.Masked())
		}
	}
	return out
}

// freeBlock is the first block of 10.0.0.0/8 of that many bits that overlaps nothing taken.
func freeBlock(bits int, taken []netip.Prefix) (netip.Prefix, bool) {
	pool := netip.MustParsePrefix("10.0.0.0/8")
	for block := netip.PrefixFrom(pool.Addr(), bits); pool.Contains(block.Addr()); block = netip.PrefixFrom(addrAdd(block.Addr(), 1<<(32-bits)), bits) {
		if !overlapsAny(block, taken) {
			return block, true
		}
	}
	return netip.Prefix{}, false
}

// setDefault sets *field to value unless the stack set it (explicit, from the decoder) or it is
// not zero.
func setDefault[T comparable](explicit map[any]bool, field *T, value T) {
	var zero T
	if *field == zero && !explicit[field] {
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

// The gallery image definitions the Packer templates publish: one per image role and variant.
const (
	GalleryImageControlPlane = "control-plane"
	GalleryImageWorkerCPU    = "worker-cpu"
	GalleryImageWorkerGPU    = "worker-gpu"
)

// PlaceholderImage is the offline default version of an image definition: `make plan` accepts
// it, `pulumi up` refuses it.
func PlaceholderImage(definition string) string {
	return placeholderGallery + definition + "/versions/0.0.0"
}

// IsPlaceholderImage reports whether an image id is the offline default that `pulumi up` refuses.
func IsPlaceholderImage(id string) bool {
	return strings.HasPrefix(id, "/subscriptions/00000000-0000-0000-0000-000000000000/")
}

// GiB shows a size in GiB for summaries.
func GiB(bytes int64) string { return fmt.Sprintf("%.1f GiB", float64(bytes)/float64(gib)) }
