package scale

import (
	"math"
	"slices"
	"strings"
	"time"
)

// SLIMetric is the apiserver's latency SLI histogram: request latency without the time spent in
// webhooks and priority-and-fairness queues.
const SLIMetric = "apiserver_request_sli_duration_seconds"

// Call is what the API call SLIs are grouped by.
type Call struct {
	Resource    string `json:"resource"`
	Subresource string `json:"subresource"`
	Verb        string `json:"verb"`
	Scope       string `json:"scope"`
}

func (c Call) String() string {
	r := c.Resource
	if c.Subresource != "" {
		r += "/" + c.Subresource
	}
	return c.Verb + " " + r + " (" + c.Scope + ")"
}

// Class is an SLO's class of calls and its p99 threshold.
type Class struct {
	Name      string
	Threshold time.Duration
}

// The upstream API call latency SLOs (kubernetes/community sig-scalability/slos/api_call_latency.md):
// mutating and single-object reads within 1 s, namespace and cluster LISTs within 30 s.
var (
	Mutating      = Class{"mutating", time.Second}
	ReadResource  = Class{"read resource", time.Second}
	ReadNamespace = Class{"read namespace", 30 * time.Second}
	ReadCluster   = Class{"read cluster", 30 * time.Second}
)

// Classes are the SLO classes in report order.
var Classes = []Class{Mutating, ReadResource, ReadNamespace, ReadCluster}

// streaming are the subresources the SLIs leave out: their calls last as long as the stream.
var streaming = []string{"log", "exec", "attach", "portforward", "proxy"}

// ClassOf is the SLO class of a call; false for what the SLIs leave out (WATCH, CONNECT and
// streaming subresources).
func ClassOf(c Call) (Class, bool) {
	if c.Verb == "WATCH" || c.Verb == "WATCHLIST" || c.Verb == "CONNECT" || slices.Contains(streaming, c.Subresource) {
		return Class{}, false
	}
	if c.Verb != "GET" && c.Verb != "LIST" {
		return Mutating, true
	}
	switch c.Scope {
	case "resource":
		return ReadResource, true
	case "namespace":
		return ReadNamespace, true
	case "cluster":
		return ReadCluster, true
	}
	return Class{}, false
}

// CallHistograms groups a scrape's SLI histograms by call, summed over apiservers.
func CallHistograms(samples []Sample) map[Call]Histogram {
	byKey := Histograms(samples, SLIMetric, func(l map[string]string) (string, bool) {
		c := Call{Resource: l["resource"], Subresource: l["subresource"], Verb: strings.ToUpper(l["verb"]), Scope: l["scope"]}
		_, ok := ClassOf(c)
		return c.Resource + "\x00" + c.Subresource + "\x00" + c.Verb + "\x00" + c.Scope, ok
	})
	out := map[Call]Histogram{}
	for k, h := range byKey {
		p := strings.Split(k, "\x00")
		out[Call{Resource: p[0], Subresource: p[1], Verb: p[2], Scope: p[3]}] = h
	}
	return out
}

// Scrape is every apiserver's SLI histograms at one moment, summed.
type Scrape struct {
	At    time.Time
	Calls map[Call]Histogram
}

// CallResult is one call's latency over a hold, judged against its class's SLO.
type CallResult struct {
	Call      Call    `json:"call"`
	Class     string  `json:"class"`
	Threshold float64 `json:"thresholdSeconds"`
	// P99 is clusterloader2's figure: the 99th percentile of the per-minute p99s (seconds).
	P99 float64 `json:"p99Seconds"`
	// HoldP50, HoldP90 and HoldP99 are quantiles over the whole hold (seconds).
	HoldP50 float64 `json:"holdP50Seconds"`
	HoldP90 float64 `json:"holdP90Seconds"`
	HoldP99 float64 `json:"holdP99Seconds"`
	Count   float64 `json:"count"`
	// Above1s, Above5s and Above30s count the calls slower than 1, 5 and 30 seconds.
	Above1s  float64 `json:"above1s"`
	Above5s  float64 `json:"above5s"`
	Above30s float64 `json:"above30s"`
	Pass     bool    `json:"pass"`
}

// Window is the span of the per-minute p99s (Prometheus' rate over [1m]).
const Window = time.Minute

// Judge computes every call's SLI over the scrapes of a hold, in order: at each scrape a minute
// or more into the hold, the p99 of the calls of the minute before; the call passes when the
// 99th percentile of those p99s is within its threshold (clusterloader2's
// quantile_over_time(0.99, ...) over the per-minute histogram_quantile(0.99, ...)).
func Judge(scrapes []Scrape) []CallResult {
	if len(scrapes) < 2 {
		return nil
	}
	first, last := scrapes[0], scrapes[len(scrapes)-1]
	var out []CallResult
	for call, end := range last.Calls {
		class, _ := ClassOf(call)
		hold := end.Since(first.Calls[call])
		if hold.Total() == 0 {
			continue
		}
		var minuteP99s []float64
		start := 0
		for i, s := range scrapes {
			for start < i && s.At.Sub(scrapes[start+1].At) >= Window {
				start++
			}
			if s.At.Sub(scrapes[start].At) < Window {
				continue
			}
			if q := s.Calls[call].Since(scrapes[start].Calls[call]).Quantile(0.99); !math.IsNaN(q) {
				minuteP99s = append(minuteP99s, q)
			}
		}
		r := CallResult{Call: call, Class: class.Name, Threshold: class.Threshold.Seconds(),
			P99: QuantileOverTime(0.99, minuteP99s), HoldP50: hold.Quantile(0.5), HoldP90: hold.Quantile(0.9), HoldP99: hold.Quantile(0.99), Count: hold.Total()}
		if len(minuteP99s) == 0 { // a hold shorter than the window
			r.P99 = r.HoldP99
		}
		r.Above1s, _ = hold.Above(1)
		r.Above5s, _ = hold.Above(5)
		r.Above30s, _ = hold.Above(30)
		r.Pass = r.P99 <= r.Threshold
		out = append(out, r)
	}
	slices.SortFunc(out, func(a, b CallResult) int { return strings.Compare(a.Call.String(), b.Call.String()) })
	return out
}

// QuantileOverTime is Prometheus' quantile_over_time: the φ-quantile of the values, linear
// between the two nearest ranks. NaN for no values.
func QuantileOverTime(q float64, values []float64) float64 {
	if len(values) == 0 {
		return math.NaN()
	}
	v := slices.Sorted(slices.Values(values))
	rank := q * float64(len(v)-1)
	lo := math.Floor(rank)
	hi := math.Min(lo+1, float64(len(v)-1))
	w := rank - lo
	return v[int(lo)]*(1-w) + v[int(hi)]*w
}
