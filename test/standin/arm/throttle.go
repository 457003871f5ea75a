package arm

import (
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"

	"github.com/clusterforge/clusterforge/components/spec"
)

// Policy is one of Compute's or Resource Manager's throttling policies (spec.ThrottlePolicy): a
// request takes a token from the policy's resource bucket and its subscription bucket; with either
// empty it is refused (429) until a token comes back.
type Policy struct {
	spec.ThrottlePolicy
	// Header, when set, reports the subscription bucket in its own header (Resource Manager's).
	Header string
}

// The policies the stand-in applies, Azure's figures from spec.
var (
	PolicyDeleteVMScaleSetVMs   = Policy{ThrottlePolicy: spec.ThrottleDeleteVMScaleSetVMs}
	PolicyGetVMScaleSetVMs      = Policy{ThrottlePolicy: spec.ThrottleGetVMScaleSetVMs}
	PolicyUpdateVM              = Policy{ThrottlePolicy: spec.ThrottleUpdateVM}
	PolicyLowCostGetVM          = Policy{ThrottlePolicy: spec.ThrottleLowCostGetVM}
	PolicyGetOperation          = Policy{ThrottlePolicy: spec.ThrottleGetOperation}
	PolicyUpdateVMScaleSet      = Policy{ThrottlePolicy: spec.ThrottleUpdateVMScaleSet}
	PolicyDeleteVMScaleSet      = Policy{ThrottlePolicy: spec.ThrottleDeleteVMScaleSet}
	PolicyLowCostGetVMScaleSet  = Policy{ThrottlePolicy: spec.ThrottleLowCostGetVMScaleSet}
	PolicyHighCostGetVMScaleSet = Policy{ThrottlePolicy: spec.ThrottleHighCostGetVMScaleSet}
	PolicyUpdateVMScaleSetVMs   = Policy{ThrottlePolicy: spec.ThrottleUpdateVMScaleSetVMs}
	PolicySubscriptionReads     = Policy{ThrottlePolicy: spec.ThrottleResourceManagerReads, Header: "x-ms-ratelimit-remaining-subscription-reads"}
	PolicySubscriptionWrites    = Policy{ThrottlePolicy: spec.ThrottleResourceManagerWrites, Header: "x-ms-ratelimit-remaining-subscription-writes"}
	PolicySubscriptionDeletes   = Policy{ThrottlePolicy: spec.ThrottleResourceManagerDeletes, Header: "x-ms-ratelimit-remaining-subscription-deletes"}
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
