package spec

import (
	"fmt"
	"net/netip"
	"slices"
	"strings"
	"time"

	"github.com/clusterforge/clusterforge/components/wellknown"
)

// Machine roles. Workers are "worker-<pool>".
const (
	RoleEtcdMain   = "etcd-main"
	RoleEtcdEvents = "etcd-events"
	RoleAPIServer  = "apiserver"
	workerPrefix   = "worker-"
)

// APIServerProbePath is the load balancer's health probe. Since Kubernetes 1.34 /readyz also
// checks every --etcd-servers-overrides cluster; excluding the events override (etcd-override-0)
// keeps an events-etcd outage from taking every apiserver out of rotation, while a broken main
// etcd still does.
const APIServerProbePath = "/readyz?exclude=" + eventsEtcdCheck + "&exclude=etcd-override-readiness-0"

// eventsEtcdCheck is the apiserver's health check of its first --etcd-servers-overrides cluster,
// the events etcd.
const eventsEtcdCheck = "etcd-override-0"

// The probe runs every APIServerProbeIntervalSeconds; APIServerProbeFailures failures in a row
// take an apiserver out of rotation, one success puts it back (Azure load balancer semantics).
const (
	APIServerProbeIntervalSeconds = 5
	APIServerProbeFailures        = 2
	// APIServerShutdownDelaySeconds is how long a stopping apiserver keeps serving while failing
	// its probe: long enough for the load balancer to take it out first, so no client sees it go.
	APIServerShutdownDelaySeconds = APIServerProbeIntervalSeconds * (APIServerProbeFailures + 2)
)

// The apiserver scale set repairs itself (L05): an instance whose apiserver fails its own
// liveness is reimaged by Azure's automatic instance repairs, keeping its instance id and address.
// Azure judges an instance only a grace period after its last change; PT10M is Azure's minimum.
// Both are in Azure's own words, as the program sends them.
const (
	APIServerRepairGracePeriod = "PT10M"
	APIServerRepairAction      = "Reimage"
)

// APIServerRepairProbePath is what the apiserver scale set's Application Health extension probes on
// each instance, the health repairs judge by: /livez without its etcd checks (the main cluster's and
// the events override's). A main-etcd outage fails every apiserver's /readyz, the load balancer's
// probe, at once; judged by that, repairs would reimage the apiservers, audit logs and all, for an
// outage a new disk cannot mend. The extension probes every APIServerProbeIntervalSeconds and
// APIServerProbeFailures failures in a row make the instance unhealthy, as the load balancer's do.
const APIServerRepairProbePath = "/livez?exclude=etcd&exclude=" + eventsEtcdCheck

// CertificateRenewBefore is how long before expiry a leaf certificate is due: the
// CertificateExpiringSoon alert fires and `make roll` renews it.
const CertificateRenewBefore = 30 * 24 * time.Hour

// Offsets of static addresses inside their subnets (Azure reserves .0 to .3).
const (
	apiServerIPOffset  = 10
	etcdMainIPOffset   = 10
	etcdEventsIPOffset = 30
	// dnsServiceIPOffset places the cluster DNS Service at the tenth address of the service range.
	dnsServiceIPOffset = 10
)

// WorkerRole is the machine role of a pool's nodes.
func WorkerRole(pool string) string { return workerPrefix + pool }

// PoolOfRole is the pool whose machines have the worker role, if any.
func (c *Cluster) PoolOfRole(role string) (Pool, bool) {
	for _, p := range c.Pools {
		if WorkerRole(p.Name) == role {
			return p, true
		}
	}
	return Pool{}, false
}

// Member is one etcd VM with a stable identity: a fixed name, a static private IP and a zone.
type Member struct {
	Name string
	IP   string
	Zone string
}

// EtcdCluster is one etcd cluster's role, settings and members.
type EtcdCluster struct {
	Role    string
	Spec    Etcd
	Members []Member
}

// ClientURLs lists every member's client URL.
func (e EtcdCluster) ClientURLs() []string {
	urls := make([]string, len(e.Members))
	for i, m := range e.Members {
		urls[i] = fmt.Sprintf("https://%s:%d", m.IP, wellknown.EtcdClientPort)
	}
	return urls
}

// InitialCluster is etcd's --initial-cluster value.
func (e EtcdCluster) InitialCluster() string {
	parts := make([]string, len(e.Members))
	for i, m := range e.Members {
		parts[i] = fmt.Sprintf("%s=https://%s:%d", m.Name, m.IP, wellknown.EtcdPeerPort)
	}
	return strings.Join(parts, ",")
}

// IPs lists the members' addresses.
func (e EtcdCluster) IPs() []string {
	ips := make([]string, len(e.Members))
	for i, m := range e.Members {
		ips[i] = m.IP
	}
	return ips
}

// EtcdClusters returns the main and the events cluster with their members' stable identities.
func (c *Cluster) EtcdClusters() []EtcdCluster {
	return []EtcdCluster{
		c.etcdCluster(RoleEtcdMain, c.EtcdMain, etcdMainIPOffset),
		c.etcdCluster(RoleEtcdEvents, c.EtcdEvents, etcdEventsIPOffset),
	}
}

func (c *Cluster) etcdCluster(role string, e Etcd, offset int) EtcdCluster {
	subnet := netip.MustParsePrefix(c.Network.EtcdSubnet).Masked().Addr()
	members := make([]Member, e.Members)
	for i := range members {
		members[i] = Member{
			Name: fmt.Sprintf("%s-%s-%d", c.Name, role, i),
			IP:   addrAdd(subnet, offset+i).String(),
		}
		if len(c.Zones) > 0 { // Validate refuses an empty list
			members[i].Zone = c.Zones[i%len(c.Zones)]
		}
	}
	return EtcdCluster{Role: role, Spec: e, Members: members}
}

// ScaleSet is one VMSS of a pool. Pools larger than one scale set holds (ScaleSetLimit) are split
// into scale sets of near-equal size.
type ScaleSet struct {
	// Name is "<pool>" for a single scale set, "<pool>-<i>" when split.
	Name string
	// AzureName is the VMSS's Azure name, "<cluster>-<Name>"; the autoscaler addresses it by this name.
	AzureName string
	Pool      Pool
	Nodes     int
	MaxNodes  int
	// SinglePlacementGroup keeps the scale set in one placement group: InfiniBand sizes only.
	SinglePlacementGroup bool
	// Zones the scale set spreads over: every zone of the cluster, or, for a single placement
	// group (one InfiniBand fabric), one zone, taken in turn by the pool's scale sets.
	Zones []string
	// VNet is the index of the pool's worker VNet the scale set lives in (Pool.VNets).
	VNet int
}

// GangDomain is the nodes of the scale set one gang may span (wellknown.GangDomainLabel): its own
// when it is a single placement group, whose InfiniBand fabric is the only one its nodes share,
// else the whole pool's.
func (s ScaleSet) GangDomain() string {
	return GangDomain(s.Pool.Name, s.Name, s.SinglePlacementGroup)
}

// GangDomain is the gang domain of a pool's scale set named setName ("<pool>" or "<pool>-<i>", as
// ScaleSet.Name).
func GangDomain(pool, setName string, singlePlacementGroup bool) string {
	if singlePlacementGroup {
		return setName
	}
	return pool
}

// ScaleSetOf is the worker scale set whose Azure name is azureName.
func (c *Cluster) ScaleSetOf(azureName string) (ScaleSet, bool) {
	for _, s := range c.ScaleSets() {
		if s.AzureName == azureName {
			return s, true
		}
	}
	return ScaleSet{}, false
}

// ScaleSetLimit is how many instances one scale set of the pool holds: a single placement group's
// for InfiniBand sizes, else a scale set's, and never more than one worker VNet holds.
func (p Pool) ScaleSetLimit() int {
	limit := int64(MaxScaleSetInstances)
	if c, _ := VMCapacity(p.VMSize); c.InfiniBand {
		limit = MaxPlacementGroupInstances
	}
	return int(min(limit, workerVNetAddresses/p.addressesPerNode()))
}

// addressesPerNode is a node's primary address and one per pod, clamped to the valid range.
func (p Pool) addressesPerNode() int64 { return int64(min(max(p.MaxPods, 1), maxPodsPerNode)) + 1 }

// ScaleSetsPerVNet is how many of the pool's scale sets one worker VNet holds at their largest:
// within its addresses, and within the primary IP configurations its nodes group holds.
func (p Pool) ScaleSetsPerVNet() int {
	limit := int64(p.ScaleSetLimit())
	return int(max(1, min(workerVNetAddresses/(limit*p.addressesPerNode()), LimitIPConfigsPerASG.Value/limit)))
}

// scaleSetCount is how many scale sets hold the pool at maxNodes.
func (p Pool) scaleSetCount() int {
	limit := p.ScaleSetLimit()
	return max(1, (min(max(p.MaxNodes, 0), MaxClusterNodes)+limit-1)/limit)
}

// VNetsNeeded is how many worker VNets the pool's scale sets take. A scale set's place is fixed
// by its index, so a growing pool appends scale sets and VNets and never moves one.
func (p Pool) VNetsNeeded() int {
	per := p.ScaleSetsPerVNet()
	return (p.scaleSetCount() + per - 1) / per
}

// WorkerVNet is one VNet of a pool's scale sets, with its one subnet spanning it.
type WorkerVNet struct {
	Pool Pool
	// PoolIndex is the pool's place in Cluster.Pools.
	PoolIndex int
	// Index is the VNet's place in Pool.VNets.
	Index  int
	Prefix string
	// Name is its Azure name, "<cluster>-<pool>-<index>".
	Name      string
	ScaleSets []ScaleSet
}

// Nodes is how many nodes the VNet holds at full size.
func (w WorkerVNet) Nodes() int {
	n := 0
	for _, s := range w.ScaleSets {
		n += s.MaxNodes
	}
	return n
}

// Addresses is what the VNet's NICs take at full size.
func (w WorkerVNet) Addresses() int64 { return int64(w.Nodes()) * w.Pool.addressesPerNode() }

// WorkerVNets lists every pool's worker VNets with their scale sets, in pool order.
func (c *Cluster) WorkerVNets() []WorkerVNet {
	var out []WorkerVNet
	sets := c.ScaleSets()
	for pi, p := range c.Pools {
		for i, prefix := range p.VNets {
			w := WorkerVNet{Pool: p, PoolIndex: pi, Index: i, Prefix: prefix, Name: fmt.Sprintf("%s-%s-%d", c.Name, p.Name, i)}
			for _, s := range sets {
				if s.Pool.Name == p.Name && s.VNet == i {
					w.ScaleSets = append(w.ScaleSets, s)
				}
			}
			out = append(out, w)
		}
	}
	return out
}

// VNetOf is the worker VNet a scale set lives in.
func (c *Cluster) VNetOf(s ScaleSet) (WorkerVNet, bool) {
	for _, w := range c.WorkerVNets() {
		if w.Pool.Name == s.Pool.Name && w.Index == s.VNet {
			return w, true
		}
	}
	return WorkerVNet{}, false
}

// NodeSubnets are the worker VNets' prefixes: each VNet is one subnet of nodes and their pods.
func (c *Cluster) NodeSubnets() []string {
	var out []string
	for _, p := range c.Pools {
		out = append(out, p.VNets...)
	}
	return out
}

// ControlPlaneVNetName is the name the control plane's VNet goes by beside the worker VNets'.
func (c *Cluster) ControlPlaneVNetName() string { return c.Name + "-control-plane" }

// ReachWorkers reports whether the worker VNets peer with the hub (Hub.ReachWorkers).
func (c *Cluster) ReachWorkers() bool {
	return c.Network.Hub.ReachWorkers == nil || *c.Network.Hub.ReachWorkers
}

// PoolOfScaleSet is the pool a worker scale set of cluster belongs to, read from its Azure name
// (<cluster>-<pool>, or <cluster>-<pool>-<i> when the pool is split; a pool's name holds no '-'),
// which no one can change once the scale set exists, unlike its tags.
func PoolOfScaleSet(cluster, scaleSet string) (string, bool) {
	rest, ok := strings.CutPrefix(scaleSet, cluster+"-")
	pool, index, split := strings.Cut(rest, "-")
	if !ok || !poolName.MatchString(pool) || split && (index == "" || strings.Trim(index, "0123456789") != "") {
		return "", false
	}
	return pool, true
}

// GangDomainOfScaleSet is the gang domain of a worker scale set of cluster, read from its Azure
// name as PoolOfScaleSet reads the pool.
func GangDomainOfScaleSet(cluster, scaleSet string, singlePlacementGroup bool) (string, bool) {
	pool, ok := PoolOfScaleSet(cluster, scaleSet)
	return GangDomain(pool, strings.TrimPrefix(scaleSet, cluster+"-"), singlePlacementGroup), ok
}

// ScaleSets splits every pool into the scale sets that hold it.
func (c *Cluster) ScaleSets() []ScaleSet {
	var sets []ScaleSet
	for _, p := range c.Pools {
		n, perVNet := p.scaleSetCount(), p.ScaleSetsPerVNet()
		size, _ := VMCapacity(p.VMSize)
		spg := size.InfiniBand
		for i := range n {
			s := ScaleSet{Name: p.Name, Pool: p, Nodes: share(p.Nodes, n, i), MaxNodes: share(p.MaxNodes, n, i),
				SinglePlacementGroup: spg, Zones: c.Zones, VNet: i / perVNet}
			if s.SinglePlacementGroup && len(c.Zones) > 0 {
				s.Zones = []string{c.Zones[i%len(c.Zones)]}
			}
			if n > 1 {
				s.Name = fmt.Sprintf("%s-%d", p.Name, i)
			}
			s.AzureName = c.Name + "-" + s.Name
			sets = append(sets, s)
		}
	}
	return sets
}

// APIServerName is the Azure name of the apiservers' load balancer and scale set.
func (c *Cluster) APIServerName() string { return c.Name + "-apiserver" }

// ScaleSetNames are the worker scale sets' Azure names.
func (c *Cluster) ScaleSetNames() []string {
	var names []string
	for _, s := range c.ScaleSets() {
		names = append(names, s.AzureName)
	}
	return names
}

// share is part i of total split into n near-equal parts.
func share(total, n, i int) int {
	s := total / n
	if i < total%n {
		s++
	}
	return s
}

// KubernetesServiceIP is the first address of the service range: the `kubernetes` service.
func (c *Cluster) KubernetesServiceIP() string {
	return addrAdd(netip.MustParsePrefix(c.Network.ServiceCIDR).Masked().Addr(), 1).String()
}

// DNSServiceIP is the cluster DNS service address (the tenth of the service range).
func (c *Cluster) DNSServiceIP() string {
	return addrAdd(netip.MustParsePrefix(c.Network.ServiceCIDR).Masked().Addr(), dnsServiceIPOffset).String()
}

// APIServerURL is the address clients and kubelets use: the internal load balancer.
func (c *Cluster) APIServerURL() string {
	return fmt.Sprintf("https://%s:%d", c.Network.APIServerIP, wellknown.APIServerPort)
}

// Roles lists every machine role of the cluster in a stable order.
func (c *Cluster) Roles() []string {
	roles := []string{RoleEtcdMain, RoleEtcdEvents, RoleAPIServer}
	for _, p := range c.Pools {
		roles = append(roles, WorkerRole(p.Name))
	}
	return roles
}

// ResourceGroup is the Azure resource group that holds every resource of the cluster.
func (c *Cluster) ResourceGroup() string { return c.Name }

// SystemPool is where cluster-level add-ons run (cluster-autoscaler, Prometheus): the pool marked
// System, which validation requires.
func (c *Cluster) SystemPool() Pool {
	if i := slices.IndexFunc(c.Pools, func(p Pool) bool { return p.System }); i >= 0 {
		return c.Pools[i]
	}
	return Pool{}
}

// RemediationMaxUnhealthy is the share of a pool's or the cluster's nodes unhealthy at once above
// which remediation replaces nothing, and, while one zone is out, of each pool's nodes in every
// other zone: half of one zone's share, so a failure spread over the zones is waited out (it is
// rarely the machines'). A zone's own outage is held by remediation's zone check.
func (c *Cluster) RemediationMaxUnhealthy() float64 { return 0.5 / float64(max(1, len(c.Zones))) }

// GangDomainShape is gang domains whose nodes are alike, at full size, as clusterforge-ops judges
// a gang against them (components/ops/gangs): each node as its pool's register
// (machine.GangDomainShapes fills it), each domain as many nodes as its scale sets may hold.
type GangDomainShape struct {
	// Labels, Taints and Allocatable are a node's once it has joined and passed preflight: every
	// label but its gang domain and zone, which each domain says.
	Labels      map[string]string `json:"labels"`
	Taints      []GangDomainTaint `json:"taints,omitempty"`
	Allocatable map[string]string `json:"allocatable"`
	Domains     []GangDomainSize  `json:"domains"`
}

// GangDomainSize is one gang domain of a shape.
type GangDomainSize struct {
	Name     string `json:"name"`
	MaxNodes int    `json:"maxNodes"`
	// Zones are the zone label's values its nodes may have.
	Zones []string `json:"zones"`
}

// GangDomainTaint is a taint as a Node carries it.
type GangDomainTaint struct {
	Key    string `json:"key"`
	Value  string `json:"value,omitempty"`
	Effect string `json:"effect"`
}
