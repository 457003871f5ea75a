package spec

import (
	"fmt"
	"math"
)

// cluster-autoscaler's Azure provider (vmType vmss, 1.36) reads Compute on two clocks: every
// AutoscalerRefreshSeconds it lists the resource group's scale sets (High Cost Get VMSS) and VMs,
// and every AutoscalerInstancesTTLSeconds, each start splayed by up to that long again, it lists
// each scale set's VMs page by page (High Cost Get VMSS, on the scale set and the subscription).
// After a scale-up it lists the grown scale set's VMs at once.
const (
	// AutoscalerRefreshSeconds is the provider's scale-set cache TTL (vmssCacheTTLInSeconds), its
	// default: the loop sees a scale set's size change within a minute.
	AutoscalerRefreshSeconds = 60
	// autoscalerInstancesTTLFloor is the provider's default instance cache TTL, 5 minutes.
	autoscalerInstancesTTLFloor = 300
	// ScaleSetVMsPageSize is how many VMs a page of a scale set's VM list holds, as the test
	// environment's Resource Manager pages them; Azure does not document it.
	ScaleSetVMsPageSize = 100
	// autoscalerReadPercent is the share of a subscription's Compute bucket the autoscaler may
	// take; clusterforge-ops, the CSR approver's joins and the rolls share the rest.
	autoscalerReadPercent = 25
)

// LimitHighCostScaleSetReads is Compute's High Cost Get VMSS subscription bucket, as a rate a minute.
var LimitHighCostScaleSetReads = Limit{Name: "High Cost Get VMSS, subscription bucket, a minute", Value: int64(ThrottleHighCostGetVMScaleSet.SubscriptionRefill),
	Kind: Rate, Per: fmt.Sprintf("subscription and region (burst %d)", int(ThrottleHighCostGetVMScaleSet.SubscriptionCapacity)), Source: computeRates}

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
// VM list at full size would take more than the autoscaler's share of High Cost Get VMSS.
func (c *Cluster) AutoscalerInstancesTTLSeconds() int {
	_, pages := c.autoscalerPages()
	budget := float64(LimitHighCostScaleSetReads.Value)*autoscalerReadPercent/100 - 60.0/AutoscalerRefreshSeconds
	return max(autoscalerInstancesTTLFloor, int(math.Ceil(float64(pages)*60/budget)))
}

// AutoscalerRate is a client-side limit of the autoscaler's calls (cloudProviderRateLimit): its
// share of policy's subscription bucket, a second and as a burst, so even a restart's listing of
// every scale set at once stays within it. Reads are held to High Cost Get VMSS, writes to
// Update VMSS.
func AutoscalerRate(policy ThrottlePolicy) (qps float64, bucket int) {
	return policy.SubscriptionRefill * autoscalerReadPercent / 100 / 60, int(policy.SubscriptionCapacity * autoscalerReadPercent / 100)
}

// AutoscalerReadUse is the autoscaler's steady High Cost Get VMSS reads a minute at full size,
// its instance lists spread over their TTL, against the subscription's bucket.
func (c *Cluster) AutoscalerReadUse() LimitUse {
	sets, pages := c.autoscalerPages()
	perMinute := 60.0/AutoscalerRefreshSeconds + float64(pages)*60/float64(c.AutoscalerInstancesTTLSeconds())
	return LimitUse{Limit: &LimitHighCostScaleSetReads, Use: int64(math.Ceil(perMinute)),
		Where: fmt.Sprintf("the subscription: cluster-autoscaler listing %d scale sets (%d pages of VMs at maxNodes) every %d s", sets, pages, c.AutoscalerInstancesTTLSeconds())}
}
