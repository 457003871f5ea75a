package scale

import (
	"strings"
	"testing"
)

func parse(t *testing.T, text string, keep func(string) bool) []Sample {
	t.Helper()
	s, err := ParseText(strings.NewReader(text), keep)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func TestAPIServerOverCountsWhatTheSLILeavesOut(t *testing.T) {
	before := parse(t, `
apiserver_request_total{code="201",resource="pods",scope="namespace",subresource="",verb="POST"} 100
apiserver_request_total{code="429",resource="pods",scope="namespace",subresource="",verb="POST"} 1
apiserver_request_total{code="200",resource="nodes",scope="cluster",subresource="",verb="WATCH"} 50
apiserver_flowcontrol_rejected_requests_total{flow_schema="global-default",priority_level="global-default",reason="queue-full"} 2
apiserver_flowcontrol_request_wait_duration_seconds_bucket{execute="true",flow_schema="system-nodes",priority_level="system",le="0.1"} 10
apiserver_flowcontrol_request_wait_duration_seconds_bucket{execute="true",flow_schema="system-nodes",priority_level="system",le="1"} 10
apiserver_flowcontrol_request_wait_duration_seconds_bucket{execute="true",flow_schema="system-nodes",priority_level="system",le="+Inf"} 10
`, APIServerMetrics)
	after := parse(t, `
apiserver_request_total{code="201",resource="pods",scope="namespace",subresource="",verb="POST"} 190
apiserver_request_total{code="429",resource="pods",scope="namespace",subresource="",verb="POST"} 6
apiserver_request_total{code="503",resource="pods",scope="namespace",subresource="",verb="POST"} 4
apiserver_request_total{code="200",resource="nodes",scope="cluster",subresource="",verb="WATCH"} 90
apiserver_request_total{code="500",resource="pods",scope="namespace",subresource="exec",verb="POST"} 9
apiserver_flowcontrol_rejected_requests_total{flow_schema="global-default",priority_level="global-default",reason="queue-full"} 5
apiserver_flowcontrol_request_wait_duration_seconds_bucket{execute="true",flow_schema="system-nodes",priority_level="system",le="0.1"} 10
apiserver_flowcontrol_request_wait_duration_seconds_bucket{execute="true",flow_schema="system-nodes",priority_level="system",le="1"} 20
apiserver_flowcontrol_request_wait_duration_seconds_bucket{execute="true",flow_schema="system-nodes",priority_level="system",le="+Inf"} 20
`, APIServerMetrics)
	got := APIServerOver(before, after)
	// 90 created, 5 throttled, 4 failed; WATCHes and exec streams are not counted.
	if got.Requests != 99 || got.Throttled != 5 || got.Failed != 4 || got.APFRejected != 3 {
		t.Errorf("requests %v throttled %v failed %v rejected %v, want 99 5 4 3", got.Requests, got.Throttled, got.Failed, got.APFRejected)
	}
	// The 10 new waits all lie in (0.1, 1]: p99 at rank 9.9 → 0.1 + 0.9 × 0.99.
	if w := got.APFWaitP99["system"]; w < 0.99 || w > 0.9911 {
		t.Errorf("APF wait p99 of system = %v, want 0.991", w)
	}
}

func TestEtcdOver(t *testing.T) {
	before := parse(t, `
etcd_disk_wal_fsync_duration_seconds_bucket{le="0.001"} 100
etcd_disk_wal_fsync_duration_seconds_bucket{le="0.008"} 100
etcd_disk_wal_fsync_duration_seconds_bucket{le="+Inf"} 100
etcd_server_leader_changes_seen_total 1
etcd_mvcc_db_total_size_in_bytes 1000
grpc_server_handled_total{grpc_code="OK",grpc_method="Range",grpc_service="etcdserverpb.KV",grpc_type="unary"} 40
grpc_server_handled_total{grpc_code="OK",grpc_method="Txn",grpc_service="etcdserverpb.KV",grpc_type="unary"} 60
grpc_server_handled_total{grpc_code="Canceled",grpc_method="Watch",grpc_service="etcdserverpb.Watch",grpc_type="bidi_stream"} 7
`, EtcdMetrics)
	after := parse(t, `
etcd_disk_wal_fsync_duration_seconds_bucket{le="0.001"} 100
etcd_disk_wal_fsync_duration_seconds_bucket{le="0.008"} 200
etcd_disk_wal_fsync_duration_seconds_bucket{le="+Inf"} 200
etcd_server_leader_changes_seen_total 3
etcd_mvcc_db_total_size_in_bytes 5000
grpc_server_handled_total{grpc_code="OK",grpc_method="Range",grpc_service="etcdserverpb.KV",grpc_type="unary"} 140
grpc_server_handled_total{grpc_code="OK",grpc_method="Txn",grpc_service="etcdserverpb.KV",grpc_type="unary"} 110
grpc_server_handled_total{grpc_code="Canceled",grpc_method="Watch",grpc_service="etcdserverpb.Watch",grpc_type="bidi_stream"} 900
`, EtcdMetrics)
	m := EtcdOver("e-0", "etcd-main", before, after)
	if want := 0.001 + 0.007*0.99; m.WALFsyncP99 < want-1e-12 || m.WALFsyncP99 > want+1e-12 {
		t.Errorf("fsync p99 = %v, want %v (the hold's 100 fsyncs, not the 100 before)", m.WALFsyncP99, want)
	}
	if m.LeaderChanges != 2 || m.DBSizeBytes != 5000 || m.BackendCommitP99 != 0 || m.Requests != 150 {
		t.Errorf("%+v", m)
	}
}
