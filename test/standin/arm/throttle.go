package arm

import (
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"
)

// Policy is one of Compute's throttling policies: a token bucket per resource and one per
// subscription and region, each refilled at a rate per minute up to its capacity. A request takes
// a token from both; with either empty it is refused (429) until a token comes back.
// Resource Manager's own buckets (reads, writes, deletes per subscription) are policies too.
type Policy struct {
	// Name is the policy as the x-ms-ratelimit-remaining-resource header names it.
	Name string
	// ResourceRefill and ResourceCapacity are per minute; 0 means the policy has no per-resource bucket.
	ResourceRefill, ResourceCapacity         float64
	SubscriptionRefill, SubscriptionCapacity float64
	// Header, when set, reports the subscription bucket in its own header (Resource Manager's).
	Header string
	// PerRequest: a request takes one token however many VMs it acts on (Resource Manager counts
	// requests; Compute counts the VMs of a batch).
	PerRequest bool
}

// Compute's policies for VMs, scale sets and scale-set VMs as "Compute throttling limits"
// (learn.microsoft.com, 2024) documents them, and Resource Manager's per-subscription token
// buckets (250 reads refilled at 25 a second, 200 writes and 200 deletes at 10 a second).
var (
	PolicyUpdateVM              = Policy{Name: "UpdateVM", ResourceRefill: 4, ResourceCapacity: 12, SubscriptionRefill: 500, SubscriptionCapacity: 1500}
	PolicyLowCostGetVM          = Policy{Name: "LowCostGetVM", ResourceRefill: 12, ResourceCapacity: 36, SubscriptionRefill: 8000, SubscriptionCapacity: 24000}
	PolicyGetOperation          = Policy{Name: "GetOperation", ResourceRefill: 15, ResourceCapacity: 45, SubscriptionRefill: 5000, SubscriptionCapacity: 15000}
	PolicyUpdateVMScaleSet      = Policy{Name: "UpdateVMScaleSet", ResourceRefill: 4, ResourceCapacity: 12, SubscriptionRefill: 500, SubscriptionCapacity: 1500}
	PolicyDeleteVMScaleSet      = Policy{Name: "DeleteVMScaleSet", ResourceRefill: 4, ResourceCapacity: 12, SubscriptionRefill: 175, SubscriptionCapacity: 525}
	PolicyLowCostGetVMScaleSet  = Policy{Name: "LowCostGetVMScaleSet", ResourceRefill: 12, ResourceCapacity: 36, SubscriptionRefill: 800, SubscriptionCapacity: 2400}
	PolicyHighCostGetVMScaleSet = Policy{Name: "HighCostGetVMScaleSet", ResourceRefill: 10, ResourceCapacity: 30, SubscriptionRefill: 360, SubscriptionCapacity: 1080}
	PolicyUpdateVMScaleSetVMs   = Policy{Name: "UpdateVMScaleSetVMs", ResourceRefill: 4, ResourceCapacity: 12, SubscriptionRefill: 500, SubscriptionCapacity: 1500}
	PolicyDeleteVMScaleSetVMs   = Policy{Name: "DeleteVMScaleSetVMs", ResourceRefill: 4, ResourceCapacity: 12, SubscriptionRefill: 500, SubscriptionCapacity: 1500}
	PolicyGetVMScaleSetVMs      = Policy{Name: "GetVMScaleSetVMs", ResourceRefill: 12, ResourceCapacity: 36, SubscriptionRefill: 2000, SubscriptionCapacity: 6000}
	PolicySubscriptionReads     = Policy{Name: "SubscriptionReads", SubscriptionRefill: 25 * 60, SubscriptionCapacity: 250, Header: "x-ms-ratelimit-remaining-subscription-reads", PerRequest: true}
	PolicySubscriptionWrites    = Policy{Name: "SubscriptionWrites", SubscriptionRefill: 10 * 60, SubscriptionCapacity: 200, Header: "x-ms-ratelimit-remaining-subscription-writes", PerRequest: true}
	PolicySubscriptionDeletes   = Policy{Name: "SubscriptionDeletes", SubscriptionRefill: 10 * 60, SubscriptionCapacity: 200, Header: "x-ms-ratelimit-remaining-subscription-deletes", PerRequest: true}
)

// PolicyListVMScaleSets is High Cost Get VMSS for a list, which the documented table applies at
// the subscription level only.
var PolicyListVMScaleSets = subscriptionOnly(PolicyHighCostGetVMScaleSet)

func subscriptionOnly(p Policy) Policy {
	p.ResourceRefill, p.ResourceCapacity = 0, 0
	return p
}

// bucket is one token bucket, refilled continuously.
type bucket struct {
	tokens float64
	at     time.Time
}

// throttle holds every bucket, by policy and scope.
type throttle struct {
	buckets map[string]*bucket
}

// charge is one bucket a request draws from.
type charge struct {
	policy   Policy
	resource string // "" for the subscription bucket
}

func (c charge) perMinute() (refill, capacity float64) {
	if c.resource == "" {
		return c.policy.SubscriptionRefill, c.policy.SubscriptionCapacity
	}
	return c.policy.ResourceRefill, c.policy.ResourceCapacity
}

// charges are the buckets a request under policies draws from on resource.
func charges(resource string, policies ...Policy) []charge {
	var out []charge
	for _, p := range policies {
		if p.ResourceCapacity > 0 && resource != "" {
			out = append(out, charge{p, strings.ToLower(resource)})
		}
		out = append(out, charge{policy: p})
	}
	return out
}

// refilled brings a bucket up to now; minute is a minute of the model's time in real time.
func (t *throttle) refilled(c charge, now time.Time, minute time.Duration) *bucket {
	if t.buckets == nil {
		t.buckets = map[string]*bucket{}
	}
	key := c.policy.Name + "|" + c.resource
	refill, capacity := c.perMinute()
	b, ok := t.buckets[key]
	if !ok {
		b = &bucket{tokens: capacity, at: now}
		t.buckets[key] = b
	}
	b.tokens = math.Min(capacity, b.tokens+refill*float64(now.Sub(b.at))/float64(minute))
	b.at = now
	return b
}

// cost is what a request acting on n VMs takes from c's bucket: one token per VM for Compute's
// policies, at most a full bucket so that no request is refused for ever; one for Resource Manager's.
func (c charge) cost(n float64) float64 {
	if c.policy.PerRequest {
		return 1
	}
	_, capacity := c.perMinute()
	return math.Min(n, capacity)
}

// take draws from every bucket of cs what the request costs, or nothing: then it says how long
// until the emptiest has it, in real time, and which policy refused.
func (t *throttle) take(cs []charge, n float64, now time.Time, minute time.Duration) (wait time.Duration, refused *Policy) {
	for _, c := range cs {
		b := t.refilled(c, now, minute)
		refill, _ := c.perMinute()
		if need := c.cost(n); b.tokens < need {
			if w := time.Duration((need - b.tokens) / refill * float64(minute)); w > wait {
				wait, refused = w, &c.policy
			}
		}
	}
	if refused != nil {
		return wait, refused
	}
	for _, c := range cs {
		t.buckets[c.policy.Name+"|"+c.resource].tokens -= c.cost(n)
	}
	return 0, nil
}

// headers reports what is left in each bucket of cs as Compute and Resource Manager do.
func (t *throttle) headers(cs []charge, now time.Time, minute time.Duration) map[string]string {
	out := map[string]string{}
	var compute []string
	for _, c := range cs {
		left := strconv.Itoa(int(t.refilled(c, now, minute).tokens))
		switch {
		case c.policy.Header != "":
			out[c.policy.Header] = left
		case c.resource == "":
			compute = append(compute, fmt.Sprintf("Microsoft.Compute/%sSubscription;%s", c.policy.Name, left))
		default:
			compute = append(compute, fmt.Sprintf("Microsoft.Compute/%sResource;%s", c.policy.Name, left))
		}
	}
	if len(compute) > 0 {
		out["x-ms-ratelimit-remaining-resource"] = strings.Join(compute, ",")
	}
	return out
}
