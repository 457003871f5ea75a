package fleet

import (
	"context"
	"math/rand/v2"
	"net/http"
	"slices"
	"sort"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore/policy"
	"github.com/Azure/azure-sdk-for-go/sdk/resourcemanager/compute/armcompute/v6"
	"golang.org/x/time/rate"

	"github.com/clusterforge/clusterforge/components/spec"
)

// AutoscalerReadsMinutes is how long the autoscaler's reads run, in the model's time: a restart,
// then several instance TTLs.
const AutoscalerReadsMinutes = 30

// autoscalerReads reads the fleet as cluster-autoscaler's Azure provider (1.36, vmType vmss) does,
// with the settings the add-ons give it: at each loop (spec.AutoscalerScanSeconds), the resource group's scale sets and VMs
// once AutoscalerRefreshSeconds have passed, and each scale set's VMs, every page, once its
// instance cache expired (the TTL after its last list, dated back by a random splay of up to the
// jitter, as the provider does). A restart lists everything in its first loop. Each of its three
// clients is limited as the cloud config limits it (spec.AutoscalerReadRate). Offered and
// delivered count the lists due and made.
func (f *fleet) autoscalerReads(ctx context.Context) (offered, delivered int, err error) {
	c := f.o.Cluster
	qps, burst := spec.AutoscalerReadRate()
	limited := func() (*armcompute.ClientFactory, error) {
		o := f.local.Options()
		o.PerRetryPolicies = append(o.PerRetryPolicies, limiter{rate.NewLimiter(rate.Limit(qps*f.o.Speedup), burst)})
		return armcompute.NewClientFactory(f.srv.Subscription, f.local.Credential(operator), o)
	}
	var clients [3]*armcompute.ClientFactory
	for i := range clients {
		if clients[i], err = limited(); err != nil {
			return 0, 0, err
		}
	}
	scaleSets, vms, setVMs := clients[0].NewVirtualMachineScaleSetsClient(), clients[1].NewVirtualMachinesClient(), clients[2].NewVirtualMachineScaleSetVMsClient()
	group := f.srv.ResourceGroup
	list := func(pages func() (bool, error)) {
		offered++
		for {
			more, err := pages()
			if err != nil {
				f.failed(err)
				return
			}
			if !more {
				delivered++
				return
			}
		}
	}

	ttl := time.Duration(c.AutoscalerInstancesTTLSeconds()) * time.Second
	jitter := c.AutoscalerInstancesJitterSeconds()
	splay := rand.New(rand.NewPCG(1, 1))
	sets := c.ScaleSets()
	listed := make([]time.Duration, len(sets)) // each set's last list, dated back by its splay
	refreshed := -time.Hour
	end := AutoscalerReadsMinutes * time.Minute
	for loop := time.Duration(0); loop < end; loop += spec.AutoscalerScanSeconds * time.Second {
		if wait := f.real(loop) - time.Since(f.began); wait > 0 {
			time.Sleep(wait)
		}
		now := f.model(time.Since(f.began)) // the loop starts late when the last one overran
		if now-refreshed >= spec.AutoscalerRefreshSeconds*time.Second {
			refreshed = now
			p := scaleSets.NewListPager(group, nil)
			list(func() (bool, error) { _, err := p.NextPage(ctx); return p.More(), err })
			q := vms.NewListPager(group, nil)
			list(func() (bool, error) { _, err := q.NextPage(ctx); return q.More(), err })
		}
		for i, s := range sets {
			if loop > 0 && now-listed[i] < ttl {
				continue
			}
			listed[i] = now - time.Duration(splay.IntN(jitter+1))*time.Second
			p := setVMs.NewListPager(group, s.AzureName, nil)
			list(func() (bool, error) { _, err := p.NextPage(ctx); return p.More(), err })
		}
		if ctx.Err() != nil {
			return offered, delivered, ctx.Err()
		}
	}

	perMinute := map[int]int{}
	for _, call := range f.srv.Calls() {
		if call.Status == http.StatusOK && slices.Contains(call.Charged, spec.ThrottleHighCostGetVMScaleSet.Name) {
			perMinute[int(f.model(call.Time.Sub(f.began))/time.Minute)]++
		}
	}
	var steady []int
	for m := 1; m < AutoscalerReadsMinutes; m++ {
		steady = append(steady, perMinute[m])
	}
	sort.Ints(steady)
	share, burstShare := spec.AutoscalerHighCostShare()
	f.reads = &Reads{Policy: spec.ThrottleHighCostGetVMScaleSet.Name, First: perMinute[0], Median: median(steady), Max: slices.Max(steady),
		Limit: spec.LimitHighCostScaleSetReads.Value, Share: share, Burst: burstShare, Planned: c.AutoscalerReadUse().Use}
	return offered, delivered, nil
}

// median of sorted values.
func median(sorted []int) float64 {
	n := len(sorted)
	if n%2 == 1 {
		return float64(sorted[n/2])
	}
	return float64(sorted[n/2-1]+sorted[n/2]) / 2
}

// limiter holds each request until its client's token bucket has a token, as the provider's
// client rate limit does.
type limiter struct{ *rate.Limiter }

func (l limiter) Do(req *policy.Request) (*http.Response, error) {
	if err := l.Wait(req.Raw().Context()); err != nil {
		return nil, err
	}
	return req.Next()
}
