package spec

import (
	"fmt"
	"maps"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/clusterforge/clusterforge/components/wellknown"
)

// Limits on counts, each the bound of what it feeds.
const (
	// MaxClusterNodes bounds targetNodes and every pool: twice the largest cluster the sizing tiers
	// were drawn for (10,000 nodes); past it etcd and apiserver sizing would be guesses.
	MaxClusterNodes = 20000
	// MaxPodPids bounds kubelet.podPidsLimit: the worker image's kernel.pid_max (machine.Sysctls).
	MaxPodPids = 1 << 22
	// MaxPools bounds the pools: each is a machine role with its own identity, user-data and scale sets.
	MaxPools = 16
	// MaxAPIServers bounds apiServer.count: every apiserver holds a full watch cache fed by its own
	// etcd watches, so past a handful more of them add etcd load, not capacity (L05: 5 at 7,500 nodes).
	MaxAPIServers = 15
	// MinQuotaBackendBytes is the smallest etcd quota accepted: below 1 GiB the history between two
	// compactions of a busy cluster fills it (L04).
	MinQuotaBackendBytes = gib
	// maxEtcdMembers: etcd's own advice is 7 at most; every write waits for a majority.
	maxEtcdMembers = 7
)

// clusterName doubles as the resource group, the prefix of every machine name and the etcd
// members' names: DNS-label safe, short enough for "<name>-etcd-events-4".
var clusterName = regexp.MustCompile(`^[a-z][a-z0-9-]{1,18}[a-z0-9]$`)

// poolName becomes the role worker-<pool> and the scale sets <cluster>-<pool>[-i].
var poolName = regexp.MustCompile(`^[a-z][a-z0-9]{0,11}$`)

// validateCounts bounds every count before anything multiplies them; it reports whether the
// address plan may be computed from them.
func (c *Cluster) validateCounts(v *validator) bool {
	if len(c.Pools) > MaxPools {
		v.fail("pools", fmt.Sprintf("merge pools: at most %d", MaxPools), "%d pools", len(c.Pools))
		return false
	}
	ok := true
	for i, p := range c.Pools {
		field := fmt.Sprintf("pools[%d]", i)
		ok = v.between(field+".nodes", int64(p.Nodes), 0, MaxClusterNodes, "a pool holds at most what the cluster does") && ok
		ok = v.between(field+".maxNodes", int64(p.MaxNodes), 0, MaxClusterNodes, "a pool holds at most what the cluster does") && ok
	}
	if !ok {
		return false // targetNodes is derived from them
	}
	ok = v.between("targetNodes", int64(c.TargetNodes), 1, MaxClusterNodes, "the control plane is sized for it (L09)")
	ok = v.between("kubelet.podPidsLimit", int64(c.Kubelet.PodPidsLimit), 1024, MaxPodPids, "a pod's processes and threads, at most the node's kernel.pid_max") && ok
	return v.between("kubelet.maxPods", int64(c.Kubelet.MaxPods), 1, maxPodsPerNode, "each pod takes a secondary IP configuration on the node's NIC (L29)") && ok
}

func (c *Cluster) validateEtcd(v *validator, field string, e Etcd) {
	if v.between(field+".members", int64(e.Members), 1, maxEtcdMembers, "3 or 5 is usual (L01)") && e.Members%2 == 0 {
		v.fail(field+".members", fmt.Sprintf("use %d or %d: an even member count tolerates no more failures than one fewer", e.Members-1, e.Members+1),
			"%d is an even member count", e.Members)
	}
	quotaOK := v.between(field+".quotaBackendBytes", e.QuotaBackendBytes, MinQuotaBackendBytes, MaxQuotaBackendBytes,
		"1 GiB to 8 GiB, etcd's recommended ceiling (L04)")
	size, known := v.vmSize(field+".vmSize", e.VMSize)
	switch {
	case !known:
	case size.LocalDiskGiB == 0:
		v.fail(field+".vmSize", "pick a size with a local disk, e.g. Standard_E8ds_v5 or Standard_L8s_v3 (L02)",
			"%s has no local temp or NVMe disk for etcd's data dir", e.VMSize)
	case quotaOK && int64(size.MemoryGiB)*gib <= e.QuotaBackendBytes:
		v.fail(field+".vmSize", "pick a size with more memory than the quota: etcd maps its whole database into memory",
			"%s has %d GiB for a %s quota", e.VMSize, size.MemoryGiB, GiB(e.QuotaBackendBytes))
	case quotaOK && int64(size.LocalDiskGiB)*gib < 2*e.QuotaBackendBytes:
		v.fail(field+".vmSize", "pick a size whose local disk holds twice the quota: a defragmentation writes a copy",
			"%s has a %d GiB local disk for a %s quota", e.VMSize, size.LocalDiskGiB, GiB(e.QuotaBackendBytes))
	}
}

func (c *Cluster) validateAPIServer(v *validator) {
	a := c.APIServer
	v.between("apiServer.count", int64(a.Count), 2, MaxAPIServers, "at least 2 for redundancy, 5 for the largest clusters (L05)")
	v.vmSize("apiServer.vmSize", a.VMSize)
	v.between("apiServer.maxRequestsInflight", int64(a.MaxRequestsInflight), 1, 20000, "leave it unset to size it from targetNodes (L09)")
	v.between("apiServer.maxMutatingRequestsInflight", int64(a.MaxMutatingRequestsInflight), 1, 20000, "leave it unset to size it from targetNodes (L09)")
	v.between("apiServer.auditLogMaxBackup", int64(a.AuditLogMaxBackup), 1, 1000, "keep at least one rotated audit log (L06)")
	v.between("apiServer.auditLogMaxSizeMB", int64(a.AuditLogMaxSizeMB), 1, 10000, "a rotated audit file, in megabytes (L06)")
	v.duration("apiServer.etcdCompactionInterval", a.EtcdCompactionInterval, time.Minute, time.Hour)
}

func (c *Cluster) validateBackup(v *validator) {
	v.duration("backup.interval", c.Backup.Interval, time.Minute, time.Hour)
}

func (c *Cluster) validateKubelet(v *validator) {
	k := c.Kubelet
	v.between("kubelet.maxConcurrentDownloads", int64(k.MaxConcurrentDownloads), 1, 64, "layer downloads at once on a node, shared by its pulls (L24)")
	v.between("kubelet.maxParallelImagePulls", int64(k.MaxParallelImagePulls), 1, 100, "images pulled at once (L20)")
	v.duration("kubelet.imagePullProgressTimeout", k.ImagePullProgressTimeout, 30*time.Second, 2*time.Hour)
}

func (c *Cluster) validateAutoscaler(v *validator) {
	a := c.Autoscaler
	v.between("autoscaler.maxUnreadyPercentage", int64(a.MaxUnreadyPercentage), 1, 100,
		"10 stops the autoscaler while a tenth of the fleet is unready (L19)")
	v.between("autoscaler.okUnreadyCount", int64(a.OkUnreadyCount), 0, MaxClusterNodes, "unready nodes tolerated whatever their share")
	v.between("autoscaler.maxScaleDownParallelism", int64(a.MaxScaleDownParallelism), 1, 1000, "nodes removed at once")
	v.duration("autoscaler.scaleDownUnneededTime", a.ScaleDownUnneededTime, time.Minute, 24*time.Hour)
	v.duration("autoscaler.scaleDownDelayAfterAdd", a.ScaleDownDelayAfterAdd, time.Minute, 24*time.Hour)
	v.duration("autoscaler.maxNodeProvisionTime", a.MaxNodeProvisionTime, time.Minute, 24*time.Hour)
}

// MaxJoinStep bounds joins.step: cluster-autoscaler's own --max-nodes-per-scaleup default is 1,000.
const MaxJoinStep = 5000

func (c *Cluster) validateJoins(v *validator) {
	j := c.Joins
	v.between("joins.step", int64(j.Step), 1, MaxJoinStep, "leave it unset to size it from the apiservers (L11)")
	v.duration("joins.pause", j.Pause, 0, 30*time.Minute)
	v.duration("joins.jitter", j.Jitter, 0, 10*time.Minute)
}

// A team's largest object: a pod with nothing but defaults is about 4 KiB as JSON; etcd takes
// 1.5 MiB a write.
const (
	MinTeamObjectBytes = 8 << 10
	MaxTeamObjectBytes = 1 << 20
)

// quotaName and quotaHard are the grammar of a ResourceQuota's hard limits as the stack may give
// them: a resource name (optionally count/ and a group-qualified resource), and a quantity.
var (
	quotaName = regexp.MustCompile(`^(count/)?[a-z0-9]([a-z0-9.-]{0,200}[a-z0-9])?(/[a-z0-9]([a-z0-9._-]{0,61}[a-z0-9])?)?$`)
	quotaHard = regexp.MustCompile(`^[0-9]{1,15}(\.[0-9]{1,6})?(m|k|M|G|T|P|E|Ki|Mi|Gi|Ti|Pi|Ei)?$`)
)

// standardQuotaNames are the names without a "/" the apiservers take in a quota (Kubernetes'
// IsStandardQuotaResourceName, hugepages aside); any other needs a group or count/.
var standardQuotaNames = []string{"cpu", "memory", "ephemeral-storage", "requests.cpu", "requests.memory", "requests.storage",
	"requests.ephemeral-storage", "limits.cpu", "limits.memory", "limits.ephemeral-storage", "pods", "resourcequotas", "services",
	"replicationcontrollers", "secrets", "persistentvolumeclaims", "configmaps", "services.nodeports", "services.loadbalancers"}

// teamPriorityName is a PriorityClass name teams may get: a DNS label, not one of Kubernetes'
// (system-) or the add-ons' (clusterforge-).
var teamPriorityName = regexp.MustCompile(`^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$`)

func (c *Cluster) validateTeams(v *validator) {
	if n := len(c.Teams.PriorityClasses); n > MaxTeamPriorityClasses {
		v.fail("teams.priorityClasses", fmt.Sprintf("name at most %d", MaxTeamPriorityClasses), "%d classes: each is a term of the team placement policy's expression", n)
	}
	seen := map[string]bool{}
	for i, pc := range c.Teams.PriorityClasses {
		field := fmt.Sprintf("teams.priorityClasses[%d]", i)
		switch {
		case !teamPriorityName.MatchString(pc.Name) || strings.HasPrefix(pc.Name, "system-") || strings.HasPrefix(pc.Name, "clusterforge-"):
			v.fail(field+".name", "use 1 to 63 lowercase letters, digits and '-', not starting with system- or clusterforge-", "%s is not a team priority class name", Excerpt(pc.Name))
		case seen[pc.Name]:
			v.fail(field+".name", "give each class once", "%s is named twice", pc.Name)
		}
		seen[pc.Name] = true
		v.between(field+".value", int64(pc.Value), MinTeamPriority, MaxTeamPriority, "above the borrow class and below the add-ons'")
	}
	sizesOK := v.between("teams.maxObjectBytes", c.Teams.MaxObjectBytes, MinTeamObjectBytes, MaxTeamObjectBytes, "a pod's JSON takes a few KiB; etcd takes 1.5 MiB a write") &&
		v.between("teams.maxDataObjectBytes", c.Teams.MaxDataObjectBytes, MinTeamObjectBytes, MaxTeamObjectBytes, "a ConfigMap holds 1 MiB of data at most")
	quota := c.EtcdMain.QuotaBackendBytes
	if footprint := c.Teams.Footprint(); sizesOK && quota >= MinQuotaBackendBytes && footprint > quota/MaxFootprintShare {
		v.fail("teams", "lower teams.quota's object counts or teams.maxObjectBytes and maxDataObjectBytes, or raise etcdMain.quotaBackendBytes",
			"one team's namespace can hold %s (each counted kind times its largest object), more than 1/%d of etcd-main's %s", GiB(footprint), MaxFootprintShare, GiB(quota))
	}
	for _, name := range slices.Sorted(maps.Keys(c.Teams.Quota)) {
		field := "teams.quota[" + MapKey(name) + "]"
		standard := strings.Contains(name, "/") || slices.Contains(standardQuotaNames, name) ||
			strings.HasPrefix(name, "hugepages-") || strings.HasPrefix(name, "requests.hugepages-")
		if !quotaName.MatchString(name) || !standard {
			v.fail(field, "name a resource as ResourceQuota does, e.g. configmaps, count/jobs.batch or requests.nvidia.com/gpu", "%s is not a quota resource name", Excerpt(name))
		} else if !quotaHard.MatchString(c.Teams.Quota[name]) {
			v.fail(field, `give a quantity, e.g. "500", "0" or "64Gi"`, "%s is not a quantity", Excerpt(c.Teams.Quota[name]))
		}
	}
}

// validateSystemPool checks pool i if it is the system pool: one such pool, without GPUs, holding
// clusterforge-ops's replicas one a node, and another pool beside it for the teams.
func (c *Cluster) validateSystemPool(v *validator, i int) {
	p, field := c.Pools[i], fmt.Sprintf("pools[%d]", i)
	switch {
	case !p.System:
	case slices.ContainsFunc(c.Pools[:i], func(p Pool) bool { return p.System }):
		v.fail(field+".system", "mark one pool as the system pool", "another pool is the system pool")
	case p.IsGPU():
		v.fail(field+".system", "run the platform's add-ons on a pool without GPUs", "a GPU pool is not the system pool")
	case p.Nodes < wellknown.OpsReplicas:
		v.fail(field+".nodes", fmt.Sprintf("give the system pool at least %d nodes", wellknown.OpsReplicas),
			"%d nodes: clusterforge-ops serves its webhooks from %d replicas, one a node", p.Nodes, wellknown.OpsReplicas)
	case len(c.Pools) == 1:
		v.fail("pools", "add a pool for the teams' pods", "the only pool is the system pool, which no team's pod may use")
	}
}

func (c *Cluster) validatePools(v *validator, countsOK bool) {
	if len(c.Pools) == 0 {
		v.fail("pools", "declare at least one worker pool", "the cluster has no worker pools")
	}
	seen := map[string]bool{}
	total := 0
	for i, p := range c.Pools {
		field := fmt.Sprintf("pools[%d]", i)
		if !poolName.MatchString(p.Name) {
			v.fail(field+".name", "use 1 to 12 lowercase letters and digits, starting with a letter", "%s is not a valid pool name", Excerpt(p.Name))
		} else if seen[p.Name] {
			v.fail(field+".name", "give every pool its own name", "pool %q is declared twice", p.Name)
		}
		seen[p.Name] = true
		if size, known := v.vmSize(field+".vmSize", p.VMSize); known && size.LocalDiskGiB == 0 {
			v.fail(field+".vmSize", "pick a size with a local disk, e.g. Standard_D16ds_v5: containerd's root and the OS disk live there (L22)",
				"%s has no local temp or NVMe disk", p.VMSize)
		} else if known && p.IsGPU() && size.GPUs == 0 {
			v.fail(field+".gpu", "remove gpu: true or pick a GPU size", "%s has no GPUs", p.VMSize)
		}
		if p.MaxPods < 1 { // the most is a NIC's IP configurations: Azure's limit, checked with the others
			v.fail(field+".maxPods", "give each node at least one pod", "%d pods a node", p.MaxPods)
		}
		if p.MaxNodes < p.Nodes {
			v.fail(field+".maxNodes", "set maxNodes to at least nodes", "nodes %d, maxNodes %d", p.Nodes, p.MaxNodes)
		}
		definition := GalleryImageWorkerCPU
		if p.IsGPU() {
			definition = GalleryImageWorkerGPU
		}
		v.galleryImage(field+".image", p.Image, definition)
		v.poolLabelsAndTaints(field, p)
		c.validateSystemPool(v, i)
		total += p.MaxNodes
	}
	if len(c.Pools) > 0 && !slices.ContainsFunc(c.Pools, func(p Pool) bool { return p.System }) {
		v.fail("pools", "mark one pool without GPUs system: true, with at least "+strconv.Itoa(wellknown.OpsReplicas)+" nodes",
			"no pool is the system pool: the platform's add-ons and their Azure identities need one no team's pod lands on")
	}
	if countsOK && c.TargetNodes < total {
		v.fail("targetNodes", fmt.Sprintf("raise it to at least %d (frozen sizes stay as they are: `make diff` shows what the sizing table suggests)", total),
			"%d is below the pools' total maxNodes %d: the control plane would be sized too small (L09)", c.TargetNodes, total)
	}
	// One CoreDNS pod per VM (required anti-affinity, L13): more replicas than nodes stay Pending.
	v.between("dns.replicas", int64(c.DNS.Replicas), 2, int64(max(2, c.TargetNodes)), "at least 2, and at most one per node (L13)")
}
