package scale

import (
	"math"
	"strings"
)

// What the SLI leaves out, read beside it: total request latency, priority-and-fairness queue
// waits and rejections, throttled and failed requests.
const (
	RequestDurationMetric = "apiserver_request_duration_seconds"
	APFWaitMetric         = "apiserver_flowcontrol_request_wait_duration_seconds"
	APFRejectedMetric     = "apiserver_flowcontrol_rejected_requests_total"
	RequestTotalMetric    = "apiserver_request_total"
)

// etcd's per-member disk latencies, size and leadership.
const (
	WALFsyncMetric      = "etcd_disk_wal_fsync_duration_seconds"
	BackendCommitMetric = "etcd_disk_backend_commit_duration_seconds"
	DBSizeMetric        = "etcd_mvcc_db_total_size_in_bytes"
	QuotaMetric         = "etcd_server_quota_backend_bytes"
	LeaderChangesMetric = "etcd_server_leader_changes_seen_total"
	// GRPCHandledMetric counts the calls a member finished serving; its unary ones are the
	// requests it answered (streams such as watches end only when their client leaves).
	GRPCHandledMetric = "grpc_server_handled_total"
)

// APIServerMetrics is what every apiserver's /metrics must keep for a step's report.
func APIServerMetrics(name string) bool {
	for _, m := range []string{SLIMetric, RequestDurationMetric, APFWaitMetric} {
		if strings.HasPrefix(name, m+"_bucket") {
			return true
		}
	}
	return name == APFRejectedMetric || name == RequestTotalMetric
}

// EtcdMetrics is what every etcd member's /metrics must keep.
func EtcdMetrics(name string) bool {
	return name == WALFsyncMetric+"_bucket" || name == BackendCommitMetric+"_bucket" || name == DBSizeMetric || name == QuotaMetric || name == LeaderChangesMetric || name == GRPCHandledMetric
}

// APIServerTotals are the apiservers' figures over a hold, summed over apiservers.
type APIServerTotals struct {
	// Requests counts every request but WATCHes and streams; Throttled those answered 429,
	// Failed those answered 5xx.
	Requests  float64 `json:"requests"`
	Throttled float64 `json:"throttled429"`
	Failed    float64 `json:"failed5xx"`
	// TotalP99 is the p99 of the whole request latency (seconds), queueing and webhooks included.
	TotalP99 float64 `json:"totalP99Seconds"`
	// APFWaitP99 is each priority level's p99 queue wait (seconds); APFRejected counts the
	// requests priority and fairness rejected.
	APFWaitP99  map[string]float64 `json:"apfWaitP99Seconds"`
	APFRejected float64            `json:"apfRejected"`
}

// APIServerOver computes the totals between two scrapes of every apiserver (samples summed).
func APIServerOver(before, after []Sample) APIServerTotals {
	nonStreaming := func(l map[string]string) (string, bool) {
		_, ok := ClassOf(Call{Resource: l["resource"], Subresource: l["subresource"], Verb: strings.ToUpper(l["verb"]), Scope: l["scope"]})
		return "", ok
	}
	t := APIServerTotals{APFWaitP99: map[string]float64{}}
	total := Histograms(after, RequestDurationMetric, nonStreaming)[""].Since(Histograms(before, RequestDurationMetric, nonStreaming)[""])
	t.TotalP99 = zeroNaN(total.Quantile(0.99))
	byLevel := func(l map[string]string) (string, bool) { return l["priority_level"], true }
	prev := Histograms(before, APFWaitMetric, byLevel)
	for level, h := range Histograms(after, APFWaitMetric, byLevel) {
		if d := h.Since(prev[level]); d.Total() > 0 {
			t.APFWaitP99[level] = d.Quantile(0.99)
		}
	}
	t.APFRejected = sum(after, APFRejectedMetric, nil) - sum(before, APFRejectedMetric, nil)
	counted := func(l map[string]string) bool { _, ok := nonStreaming(l); return ok }
	t.Requests = sum(after, RequestTotalMetric, counted) - sum(before, RequestTotalMetric, counted)
	code := func(prefix string) func(map[string]string) bool {
		return func(l map[string]string) bool { return counted(l) && strings.HasPrefix(l["code"], prefix) }
	}
	t.Throttled = sum(after, RequestTotalMetric, code("429")) - sum(before, RequestTotalMetric, code("429"))
	t.Failed = sum(after, RequestTotalMetric, code("5")) - sum(before, RequestTotalMetric, code("5"))
	return t
}

// EtcdMember is one member's figures over a hold.
type EtcdMember struct {
	Member string `json:"member"`
	Role   string `json:"role"`
	// WALFsyncP99 and BackendCommitP99 are p99s in seconds.
	WALFsyncP99      float64 `json:"walFsyncP99Seconds"`
	BackendCommitP99 float64 `json:"backendCommitP99Seconds"`
	// DBSizeBytes is the database size at the end.
	DBSizeBytes   float64 `json:"dbSizeBytes"`
	LeaderChanges float64 `json:"leaderChanges"`
	// Requests counts the unary calls the member served.
	Requests float64 `json:"requests"`
}

// EtcdOver computes one member's figures between two scrapes of it.
func EtcdOver(member, role string, before, after []Sample) EtcdMember {
	all := func(map[string]string) (string, bool) { return "", true }
	p99 := func(metric string) float64 {
		return zeroNaN(Histograms(after, metric, all)[""].Since(Histograms(before, metric, all)[""]).Quantile(0.99))
	}
	return EtcdMember{Member: member, Role: role,
		WALFsyncP99: p99(WALFsyncMetric), BackendCommitP99: p99(BackendCommitMetric),
		DBSizeBytes:   sum(after, DBSizeMetric, nil),
		LeaderChanges: sum(after, LeaderChangesMetric, nil) - sum(before, LeaderChangesMetric, nil),
		Requests:      sum(after, GRPCHandledMetric, unary) - sum(before, GRPCHandledMetric, unary)}
}

func unary(l map[string]string) bool { return l["grpc_type"] == "unary" }

// sum adds the values of a metric's series that match (all when match is nil).
func sum(samples []Sample, name string, match func(map[string]string) bool) float64 {
	var total float64
	for _, s := range samples {
		if s.Name == name && (match == nil || match(s.Labels)) {
			total += s.Value
		}
	}
	return total
}

// zeroNaN reports no observations as 0, which JSON can carry.
func zeroNaN(v float64) float64 {
	if math.IsNaN(v) {
		return 0
	}
	return v
}
