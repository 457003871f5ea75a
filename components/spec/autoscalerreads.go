package spec

import (
	"cmp"
	"fmt"
	"math"
	"slices"
)

// cluster-autoscaler's Azure provider (vmType vmss, 1.36) reads Compute on two clocks: every
// AutoscalerRefreshSeconds it lists the resource group's scale sets (High Cost Get VMSS) and VMs,
// and each scale set's VMs page by page (High Cost Get VMSS, on the scale set and the
// subscription) once its instance cache expires: AutoscalerInstancesTTLSeconds after its last list,
// less a random splay of up to AutoscalerInstancesJitterSeconds. After a scale-up it lists the
// grown scale set's VMs at once.
const (
	// AutoscalerRefreshSeconds is the provider's scale-set cache TTL (vmssCacheTTLInSeconds), its
	// default: the loop sees a scale set's size change within a minute.
	AutoscalerRefreshSeconds = 60
	// AutoscalerScanSeconds is its loop (--scan-interval), the default: an expired instance cache
	// is listed at the next loop.
	AutoscalerScanSeconds = 10
	// autoscalerInstancesTTLFloor is the provider's default instance cache TTL, 5 minutes.
	autoscalerInstancesTTLFloor = 300
	// ScaleSetVMsPageSize is how many VMs a page of a scale set's VM list holds, as the test
	// environment's Resource Manager pages them; Azure does not document it.
	ScaleSetVMsPageSize = 100
	// autoscalerSharePercent is the share of a subscription's Compute bucket the autoscaler may
	// take; clusterforge-ops, the CSR approver's joins and the rolls share the rest.
	autoscalerSharePercent = 25
)

// LimitHighCostScaleSetReads is Compute's High Cost Get VMSS subscription bucket as a rate: its
// refill a minute, which steady reads must stay under (the other rate rows are bursts).
var LimitHighCostScaleSetReads = Limit{Name: "High Cost Get VMSS, the subscription bucket's refill a minute", Value: int64(ThrottleHighCostGetVMScaleSet.SubscriptionRefill),
	Kind: Rate, Per: fmt.Sprintf("subscription and region (burst %d)", int(ThrottleHighCostGetVMScaleSet.SubscriptionCapacity)), Source: computeRates}

// AutoscalerHighCostShare is the autoscaler's share of High Cost Get VMSS's subscription bucket:
// of its refill a minute (LimitHighCostScaleSetReads), and of its capacity, a burst.
func AutoscalerHighCostShare() (perMinute, burst int64) {
	return LimitHighCostScaleSetReads.Value * autoscalerSharePercent / 100, int64(ThrottleHighCostGetVMScaleSet.SubscriptionCapacity) * autoscalerSharePercent / 100
}

// autoscalerPages is what cluster-autoscaler lists at full size: the scale sets, and the pages of
// every scale set's VM list at maxNodes.
func (c *Cluster) autoscalerPages() (scaleSets, pages int) {
	for _, s := range c.ScaleSets() {
		scaleSets++
		pages += max(1, (s.MaxNodes+ScaleSetVMsPageSize-1)/ScaleSetVMsPageSize)
	}
	return scaleSets, pages
}

// AutoscalerInstancesTTLSeconds is the autoscaler's instance cache TTL
// (vmssVirtualMachinesCacheTTLInSeconds): the provider's default, or longer when every scale set's
// VM list at full size, made on average every three quarters of it (the splay), would take more
// than the autoscaler's share of High Cost Get VMSS.
func (c *Cluster) AutoscalerInstancesTTLSeconds() int {
	_, pages := c.autoscalerPages()
	share, _ := AutoscalerHighCostShare()
	budget := float64(share) - 60.0/AutoscalerRefreshSeconds
	return max(autoscalerInstancesTTLFloor, int(math.Ceil(float64(pages)*60/budget/(1-autoscalerJitterShare/2))))
}

// autoscalerJitterShare is the splay's share of the TTL (vmssVmsCacheJitter): the lists come every
// (1 - share) to 1 TTL, on average 1 - share/2 of it.
const autoscalerJitterShare = 0.5

// AutoscalerInstancesJitterSeconds is the largest splay of a scale set's next VM list
// (vmssVmsCacheJitter): the provider dates each list up to this much earlier, at random, so lists
// made together (a restart's) drift apart. Half the TTL: the lists come every half to whole TTL,
// three quarters of it on average.
func (c *Cluster) AutoscalerInstancesJitterSeconds() int {
	return int(float64(c.AutoscalerInstancesTTLSeconds()) * autoscalerJitterShare)
}

// autoscalerInstancesMeanSeconds is how often, on average, the autoscaler lists a scale set's VMs.
func (c *Cluster) autoscalerInstancesMeanSeconds() float64 {
	return float64(c.AutoscalerInstancesTTLSeconds()) - float64(c.AutoscalerInstancesJitterSeconds())/2
}

// The provider limits each of its clients on its own (cloud-provider-azure's azclient): the scale
// sets' client and their VMs' both read High Cost Get VMSS, and the scale sets' client writes both
// a scale set's size (Update VMSS) and its instances' deletion (Delete VMSS).
const autoscalerHighCostReaders = 2

// AutoscalerReadRate is the limit of each of the autoscaler's clients' reads
// (cloudProviderRateLimitQPS, cloudProviderRateLimitBucket): together, the two that read High Cost
// Get VMSS take its share of the subscription's bucket, a second and as a burst, so even a
// restart's listing of every scale set at once stays within it.
func AutoscalerReadRate() (qps float64, bucket int) {
	return autoscalerShare(ThrottleHighCostGetVMScaleSet, autoscalerHighCostReaders)
}

// AutoscalerWriteRate is the limit of its clients' writes: its share of the smaller of the two
// buckets the scale sets' client writes to.
func AutoscalerWriteRate() (qps float64, bucket int) {
	return autoscalerShare(slices.MinFunc([]ThrottlePolicy{ThrottleUpdateVMScaleSet, ThrottleDeleteVMScaleSet}, func(a, b ThrottlePolicy) int {
		return cmp.Compare(a.SubscriptionRefill, b.SubscriptionRefill)
	}), 1)
}

// autoscalerShare is the autoscaler's share of policy's subscription bucket, split among clients: a second, and a burst.
func autoscalerShare(policy ThrottlePolicy, clients int) (qps float64, bucket int) {
	f := float64(autoscalerSharePercent) / 100 / float64(clients)
	return policy.SubscriptionRefill * f / 60, int(policy.SubscriptionCapacity * f)
}

// AutoscalerReadUse is the autoscaler's steady High Cost Get VMSS reads a minute at full size,
// its instance lists made every three quarters of their TTL on average, against the
// subscription's bucket.
func (c *Cluster) AutoscalerReadUse() LimitUse {
	sets, pages := c.autoscalerPages()
	perMinute := 60.0/AutoscalerRefreshSeconds + float64(pages)*60/c.autoscalerInstancesMeanSeconds()
	return LimitUse{Limit: &LimitHighCostScaleSetReads, Use: int64(math.Ceil(perMinute)),
		Where: fmt.Sprintf("cluster-autoscaler listing %d scale sets (%d pages of VMs at maxNodes) every %g s on average", sets, pages, c.autoscalerInstancesMeanSeconds())}
}
