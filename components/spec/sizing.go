package spec

import "math"

// A sizeTier is the control-plane shape for clusters of up to maxNodes workers. Each column cites
// the lesson it encodes; the tiers follow the seeds' own steps (500, 2,500, 7,500, 10,000+).
type sizeTier struct {
	maxNodes int

	// apiserverVMSize: apiserver memory grows linearly with node count, ~70 GB heap per apiserver
	// at 7,500 nodes (L09, "Scaling Kubernetes to 7,500 nodes"); E-series gives 8 GiB per vCPU.
	apiserverVMSize string
	// maxRequestsInflight / maxMutatingRequestsInflight: the 400/200 defaults throttle list
	// storms from thousands of kubelets; raised with the node count (L09, L10).
	maxRequestsInflight, maxMutatingRequestsInflight int

	// etcdVMSize: etcd is fsync-latency bound, so every size has a local temp/NVMe disk (L02);
	// memory stays above the backend quota.
	etcdVMSize string
	// quotaBackendBytes: the 2 GB default stopped all writes past 1,000 nodes (L04); 8 GiB is the ceiling.
	quotaBackendBytes int64

	// eventsMembers, eventsVMSize, eventsQuota: Events churn hardest, in their own cluster (L03).
	eventsMembers    int
	eventsVMSize     string
	eventsQuotaBytes int64
}

const gib = int64(1) << 30

// MaxQuotaBackendBytes is the largest etcd backend quota clusterforge accepts (L04).
const MaxQuotaBackendBytes = 8 * gib

var sizeTiers = []sizeTier{
	{maxNodes: 500, apiserverVMSize: "Standard_E4s_v5", maxRequestsInflight: 400, maxMutatingRequestsInflight: 200,
		etcdVMSize: "Standard_D2ds_v5", quotaBackendBytes: 4 * gib,
		eventsMembers: 3, eventsVMSize: "Standard_D2ds_v5", eventsQuotaBytes: 2 * gib},
	{maxNodes: 2500, apiserverVMSize: "Standard_E16s_v5", maxRequestsInflight: 1000, maxMutatingRequestsInflight: 500,
		etcdVMSize: "Standard_E8ds_v5", quotaBackendBytes: 8 * gib,
		eventsMembers: 3, eventsVMSize: "Standard_D4ds_v5", eventsQuotaBytes: 4 * gib},
	{maxNodes: 7500, apiserverVMSize: "Standard_E32s_v5", maxRequestsInflight: 2000, maxMutatingRequestsInflight: 1000,
		etcdVMSize: "Standard_L8s_v3", quotaBackendBytes: 8 * gib,
		eventsMembers: 3, eventsVMSize: "Standard_E8ds_v5", eventsQuotaBytes: 8 * gib},
	{maxNodes: math.MaxInt, apiserverVMSize: "Standard_E48s_v5", maxRequestsInflight: 3000, maxMutatingRequestsInflight: 1000,
		etcdVMSize: "Standard_L16s_v3", quotaBackendBytes: 8 * gib,
		eventsMembers: 5, eventsVMSize: "Standard_L8s_v3", eventsQuotaBytes: 8 * gib},
}

func tierFor(nodes int) sizeTier {
	for _, t := range sizeTiers {
		if nodes <= t.maxNodes {
			return t
		}
	}
	return sizeTiers[len(sizeTiers)-1]
}

// joinStepFor is the most nodes a pool grows by at once: a quarter of the apiservers' mutating
// seats, since each joining kubelet makes a handful of writes (certificate request, node, status,
// lease, its DaemonSets' pods) within seconds (L11). Bounded to Joins.Step's valid range.
func joinStepFor(apiservers, maxMutatingInflight int) int {
	return min(max(apiservers*maxMutatingInflight/4, 1), MaxJoinStep)
}

// dnsReplicasFor gives one CoreDNS replica per 100 nodes, at least 2: with required anti-affinity
// each lands on its own VM, staying under Azure's per-VM DNS rate limit (L13).
func dnsReplicasFor(nodes int) int {
	return max(2, (nodes+99)/100)
}
