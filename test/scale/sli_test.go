package scale

import (
	"math"
	"strings"
	"testing"
	"time"
)

// Series written as kube-apiserver 1.34 served them on /metrics (its HELP text and labels), with
// fewer buckets.
const exposition = `# HELP apiserver_request_sli_duration_seconds [STABLE] Response latency distribution (not counting webhook duration and priority & fairness queue wait times) in seconds for each verb, group, version, resource, subresource, scope and component.
# TYPE apiserver_request_sli_duration_seconds histogram
apiserver_request_sli_duration_seconds_bucket{component="apiserver",group="",resource="pods",scope="namespace",subresource="",verb="POST",version="v1",le="0.1"} 80
apiserver_request_sli_duration_seconds_bucket{component="apiserver",group="",resource="pods",scope="namespace",subresource="",verb="POST",version="v1",le="1"} 98
apiserver_request_sli_duration_seconds_bucket{component="apiserver",group="",resource="pods",scope="namespace",subresource="",verb="POST",version="v1",le="5"} 100
apiserver_request_sli_duration_seconds_bucket{component="apiserver",group="",resource="pods",scope="namespace",subresource="",verb="POST",version="v1",le="30"} 100
apiserver_request_sli_duration_seconds_bucket{component="apiserver",group="",resource="pods",scope="namespace",subresource="",verb="POST",version="v1",le="+Inf"} 100
apiserver_request_sli_duration_seconds_sum{component="apiserver",group="",resource="pods",scope="namespace",subresource="",verb="POST",version="v1"} 12.5
apiserver_request_sli_duration_seconds_bucket{component="apiserver",group="",resource="pods",scope="namespace",subresource="log",verb="GET",version="v1",le="+Inf"} 7
apiserver_request_sli_duration_seconds_bucket{component="apiserver",group="",resource="nodes",scope="cluster",subresource="",verb="WATCH",version="v1",le="+Inf"} 3
apiserver_request_total{code="201",component="apiserver",dry_run="",group="",resource="pods",scope="namespace",subresource="",verb="POST",version="v1"} 100
etcd_request_duration_seconds_bucket{operation="get",type="a \"quoted\", label",le="+Inf"} 1
`

func TestParseTextKeepsSeriesAndLabels(t *testing.T) {
	samples, err := ParseText(strings.NewReader(exposition), func(name string) bool {
		return strings.HasPrefix(name, SLIMetric) || name == "etcd_request_duration_seconds_bucket"
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(samples) != 9 {
		t.Fatalf("kept %d samples, want 9 (the SLI's and etcd's, not apiserver_request_total)", len(samples))
	}
	if got := samples[8].Labels["type"]; got != `a "quoted", label` {
		t.Errorf("escaped label value = %q", got)
	}
	if samples[4].Labels["le"] != "+Inf" || samples[4].Value != 100 {
		t.Errorf("+Inf bucket = %+v", samples[4])
	}
	calls := CallHistograms(samples)
	if len(calls) != 1 {
		t.Fatalf("calls = %v, want only POST pods: log is streaming, WATCH is left out", calls)
	}
	h := calls[Call{Resource: "pods", Verb: "POST", Scope: "namespace"}]
	if h.Total() != 100 {
		t.Errorf("total = %v, want 100", h.Total())
	}
	// rank 99 of 100: 98 within 1 s, 2 in (1, 5] → 1 + 4 × (99-98)/2.
	if got := h.Quantile(0.99); got != 3 {
		t.Errorf("p99 = %v, want 3", got)
	}
	if n, ok := h.Above(1); !ok || n != 2 {
		t.Errorf("above 1 s = %v %v, want 2", n, ok)
	}
}

func TestParseTextRefusesMalformedLines(t *testing.T) {
	for _, in := range []string{`x{a="1} 2`, `x{a=1} 2`, `x`, `x{a="1"} nope`} {
		if _, err := ParseText(strings.NewReader(in), func(string) bool { return true }); err == nil {
			t.Errorf("%q parsed", in)
		}
	}
}

func h(counts ...float64) Histogram {
	bounds := []float64{0.5, 1, 5, 30, math.Inf(1)}
	out := make(Histogram, len(counts))
	for i, c := range counts {
		out[i] = Bucket{UpperBound: bounds[i], Count: c}
	}
	return out
}

func TestQuantileAsPrometheus(t *testing.T) {
	for _, tc := range []struct {
		name string
		h    Histogram
		q    float64
		want float64
	}{
		{"in the first bucket, from 0", h(100, 100, 100, 100, 100), 0.5, 0.25},
		{"interpolated in (1, 5]", h(50, 90, 100, 100, 100), 0.95, 3},
		{"in +Inf: the highest finite bound", h(0, 0, 0, 0, 10), 0.99, 30},
		{"empty", h(0, 0, 0, 0, 0), 0.99, math.NaN()},
	} {
		got := tc.h.Quantile(tc.q)
		if !(got == tc.want || math.IsNaN(got) && math.IsNaN(tc.want)) {
			t.Errorf("%s: %v, want %v", tc.name, got, tc.want)
		}
	}
}

func TestQuantileOverTimeAsPrometheus(t *testing.T) {
	// Prometheus: rank φ(n-1), linear between neighbours.
	if got := QuantileOverTime(0.5, []float64{4, 1, 3, 2}); got != 2.5 {
		t.Errorf("median of 1..4 = %v, want 2.5", got)
	}
	if got := QuantileOverTime(0.99, []float64{1, 2}); math.Abs(got-1.99) > 1e-12 {
		t.Errorf("p99 of {1,2} = %v, want 1.99", got)
	}
}

// A hold of three minutes, scraped every 5 s, where one minute in the middle is slow: the
// per-minute p99s catch it, and the 99th percentile of them fails the call's SLO.
func TestJudgeUsesThePerMinuteP99s(t *testing.T) {
	post := Call{Resource: "pods", Verb: "POST", Scope: "namespace"}
	start := time.Date(2026, 11, 24, 0, 0, 0, 0, time.UTC)
	var scrapes []Scrape
	total := h(0, 0, 0, 0, 0)
	for i := 0; i <= 36; i++ { // 0 .. 180 s
		at := start.Add(time.Duration(i) * 5 * time.Second)
		if i > 0 {
			slow := i > 12 && i <= 24 // 60 s .. 120 s
			if slow {
				total = total.Add(h(0, 0, 10, 10, 10)) // 10 calls in (1, 5]
			} else {
				total = total.Add(h(10, 10, 10, 10, 10)) // 10 calls within 0.5 s
			}
		}
		scrapes = append(scrapes, Scrape{At: at, Calls: map[Call]Histogram{post: total}})
	}
	res := Judge(scrapes)
	if len(res) != 1 {
		t.Fatalf("results: %+v", res)
	}
	r := res[0]
	if r.Count != 360 || r.Class != Mutating.Name || r.Threshold != 1 {
		t.Errorf("count %v class %q threshold %v", r.Count, r.Class, r.Threshold)
	}
	// The minute ending at 120 s holds only slow calls: its p99 is 1 + 4 × 0.99 = 4.96.
	if math.Abs(r.P99-4.96) > 0.05 || r.Pass {
		t.Errorf("p99 of per-minute p99s = %v pass %v; want about 4.96, failing", r.P99, r.Pass)
	}
	// Over the hold, 120 of 360 calls were slow: p99 at rank 356.4 lies in (1, 5].
	if want := 1 + 4*(356.4-240)/120; math.Abs(r.HoldP99-want) > 1e-9 {
		t.Errorf("hold p99 = %v, want %v", r.HoldP99, want)
	}
	if r.Above1s != 120 || r.Above5s != 0 || r.Above30s != 0 {
		t.Errorf("above 1/5/30 s = %v/%v/%v, want 120/0/0", r.Above1s, r.Above5s, r.Above30s)
	}
}

func TestClassOf(t *testing.T) {
	for _, tc := range []struct {
		call Call
		want string
	}{
		{Call{"pods", "", "POST", "namespace"}, Mutating.Name},
		{Call{"nodes", "status", "PATCH", "resource"}, Mutating.Name},
		{Call{"leases", "", "PUT", "resource"}, Mutating.Name},
		{Call{"pods", "", "GET", "resource"}, ReadResource.Name},
		{Call{"pods", "", "LIST", "namespace"}, ReadNamespace.Name},
		{Call{"nodes", "", "LIST", "cluster"}, ReadCluster.Name},
		{Call{"pods", "exec", "POST", "resource"}, ""},
		{Call{"pods", "log", "GET", "resource"}, ""},
		{Call{"nodes", "", "WATCH", "cluster"}, ""},
	} {
		c, ok := ClassOf(tc.call)
		if c.Name != tc.want || ok != (tc.want != "") {
			t.Errorf("%v: %q %v, want %q", tc.call, c.Name, ok, tc.want)
		}
	}
}
