package addons

import (
	"fmt"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/clusterforge/clusterforge/test/toolchain"

	"sigs.k8s.io/yaml"

	"github.com/clusterforge/clusterforge/components/spec"
)

// promtool is the pinned Prometheus v3.5.0 promtool that `make tools` builds.
func promtool(t *testing.T) string { return toolchain.Binary(t, "bin/promtool") }

func runPromtool(t *testing.T, dir string, args ...string) string {
	t.Helper()
	cmd := exec.Command(promtool(t), args...)
	cmd.Dir = dir
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("promtool %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return string(out)
}

// writePrometheusFiles writes the stack's prometheus.yml and rule file into a new directory.
func writePrometheusFiles(t *testing.T, c *spec.Cluster) string {
	t.Helper()
	dir := t.TempDir()
	files, err := PrometheusFiles(c)
	if err != nil {
		t.Fatal(err)
	}
	for name, content := range files {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

func TestPromtoolChecksConfigAndRules(t *testing.T) {
	rules := 0
	for _, g := range AlertRules().Groups {
		rules += len(g.Rules)
	}
	for name, c := range stacks(t) {
		dir := writePrometheusFiles(t, c)
		// --syntax-only: the service account token and CA exist only inside the pod.
		out := runPromtool(t, dir, "check", "config", "--syntax-only", PrometheusConfigFile)
		out += runPromtool(t, dir, "check", "rules", PrometheusRulesFile)
		if !strings.Contains(out, "SUCCESS: "+PrometheusConfigFile+" is valid prometheus config file syntax") || !strings.Contains(out, fmt.Sprintf("SUCCESS: %d rules found", rules)) {
			t.Errorf("%s: promtool did not accept the files:\n%s", name, out)
		}
	}
}

// alertScenario is synthetic series and, at each evaluation time, the alerts that must fire
// (with their series labels); every other alert must stay quiet then.
type alertScenario struct {
	name   string
	series map[string]string // series → promtool's expanding notation, one value per minute
	fire   map[string]map[string]map[string]string
}

var alertScenarios = []alertScenario{
	{
		name: "5% of requests throttled from minute 11",
		series: map[string]string{
			`apiserver_request_total{job="apiserver",code="200"}`: "0+6000x40",
			`apiserver_request_total{job="apiserver",code="429"}`: "0x10 300+300x29",
		},
		fire: map[string]map[string]map[string]string{
			"10m": {}, "14m": {}, // quiet before, and during the 5 minutes of `for`
			"25m": {"APIServerThrottling": {}},
		},
	},
	{
		name: "2% of requests fail with 5xx",
		series: map[string]string{
			`apiserver_request_total{job="apiserver",code="200"}`: "0+6000x40",
			`apiserver_request_total{job="apiserver",code="503"}`: "0+120x40",
		},
		fire: map[string]map[string]map[string]string{"25m": {"APIServerErrors": {}}},
	},
	{
		name: "half a percent of 5xx and 429 is noise",
		series: map[string]string{
			`apiserver_request_total{job="apiserver",code="200"}`: "0+6000x40",
			`apiserver_request_total{job="apiserver",code="500"}`: "0+30x40",
			`apiserver_request_total{job="apiserver",code="429"}`: "0+30x40",
		},
		fire: map[string]map[string]map[string]string{"30m": {}},
	},
	{
		name: "etcd raises NOSPACE at minute 6",
		series: map[string]string{
			`etcd_debugging_server_alarms{job="etcd",etcd_cluster="etcd-main",instance="10.0.1.4:2381",alarm_type="NOSPACE",server_id="8e9e05c52164694d"}`: "0x5 1x10",
		},
		fire: map[string]map[string]map[string]string{
			"4m": {},
			"8m": {"EtcdNoSpace": {"etcd_cluster": "etcd-main", "instance": "10.0.1.4:2381"}},
		},
	},
	{
		name: "etcd's database at 87.5% of its quota",
		series: map[string]string{
			`etcd_mvcc_db_total_size_in_bytes{job="etcd",etcd_cluster="etcd-main",instance="10.0.1.4:2381"}`:    "7516192768x30",
			`etcd_server_quota_backend_bytes{job="etcd",etcd_cluster="etcd-main",instance="10.0.1.4:2381"}`:     "8589934592x30",
			`etcd_mvcc_db_total_size_in_bytes{job="etcd",etcd_cluster="etcd-events",instance="10.0.1.20:2381"}`: "1073741824x30",
			`etcd_server_quota_backend_bytes{job="etcd",etcd_cluster="etcd-events",instance="10.0.1.20:2381"}`:  "8589934592x30",
		},
		fire: map[string]map[string]map[string]string{
			"5m":  {},
			"15m": {"EtcdBackendNearQuota": {"job": "etcd", "etcd_cluster": "etcd-main", "instance": "10.0.1.4:2381"}},
		},
	},
	{
		name: "the backup store goes down at minute 5",
		series: map[string]string{
			`clusterforge_etcd_backup_last_success_timestamp_seconds{job="etcd-backup",instance="10.0.1.10:2382"}`: "0+60x5 300x20",
			`clusterforge_etcd_backup_last_success_timestamp_seconds{job="etcd-backup",instance="10.0.1.11:2382"}`: "0x25",
			`clusterforge_etcd_backup_interval_seconds{job="etcd-backup",instance="10.0.1.10:2382"}`:               "240x25",
			`clusterforge_etcd_backup_failures_total{job="etcd-backup",instance="10.0.1.10:2382"}`:                 "0x5 1+1x20",
		},
		fire: map[string]map[string]map[string]string{
			"5m":  {},
			"7m":  {"EtcdBackupFailing": {}},
			"14m": {"EtcdBackupFailing": {}, "EtcdBackupStale": {}},
		},
	},
	{
		name: "a certificate comes within 30 days of expiry at minute 5",
		series: map[string]string{
			// At minute 0 one expires in 30 days and 4 minutes, another in a year.
			`clusterforge_certificate_expiry_timestamp_seconds{job="certificates",instance="10.0.0.4:2383",source="/etc/kubernetes/pki/apiserver.crt",subject="kube-apiserver"}`: "2592240x10",
			`clusterforge_certificate_expiry_timestamp_seconds{job="certificates",instance="10.0.0.4:2383",source="tls://10.0.1.10:2379",subject="etcd-main"}`:                   "31536000x10",
			`clusterforge_certificate_read_errors{job="certificates",instance="10.0.0.4:2383"}`:                                                                                  "0x10",
		},
		fire: map[string]map[string]map[string]string{
			"3m": {},
			"6m": {"CertificateExpiringSoon": {"source": "/etc/kubernetes/pki/apiserver.crt", "subject": "kube-apiserver"}},
		},
	},
	{
		name: "an etcd member presents no certificate for 20 minutes",
		series: map[string]string{
			`clusterforge_certificate_read_errors{job="certificates",instance="10.0.0.4:2383"}`: "0x4 1x25",
		},
		fire: map[string]map[string]map[string]string{"10m": {}, "25m": {"CertificateUnreadable": {}}},
	},
	{
		name: "the brake refuses removals from pool gpu at minute 5",
		series: map[string]string{
			`clusterforge_brake_refusals_total{job="clusterforge-ops",instance="10.0.4.20:9443",scope="gpu"}`: "_x5 1+1x5 6x20",
		},
		fire: map[string]map[string]map[string]string{"3m": {}, "7m": {"ScaleDownBrakeEngaged": {"scope": "gpu"}}, "25m": {}},
	},
	{
		name: "one clusterforge-ops replica gets no Azure token, the other signs in at minute 3",
		series: map[string]string{
			`clusterforge_ops_azure_signed_in{job="clusterforge-ops",instance="10.0.4.20:9443"}`: "0x2 1x30",
			`clusterforge_ops_azure_signed_in{job="clusterforge-ops",instance="10.0.4.21:9443"}`: "0x30",
		},
		fire: map[string]map[string]map[string]string{"5m": {}, "15m": {"AzureSignInFailing": {}}},
	},
	{
		name: "the apiserver repairs are suspended from minute 5 to minute 45; one replica cannot read them",
		series: map[string]string{
			`clusterforge_apiserver_repairs_suspended{job="clusterforge-ops",instance="10.0.4.20:9443"}`: "0x5 1x40 0x20",
			`clusterforge_apiserver_repairs_suspended{job="clusterforge-ops",instance="10.0.4.21:9443"}`: "_x65",
		},
		fire: map[string]map[string]map[string]string{"30m": {}, "40m": {"APIServerRepairsSuspended": {}}, "60m": {}},
	},
	{
		name: "the delta stream stops at minute 5",
		series: map[string]string{
			`clusterforge_etcd_backup_delta_last_flush_timestamp_seconds{job="etcd-backup",instance="10.0.1.10:2382"}`: "0+60x5 300x20",
			`clusterforge_etcd_backup_delta_last_flush_timestamp_seconds{job="etcd-backup",instance="10.0.1.11:2382"}`: "0x25",
		},
		fire: map[string]map[string]map[string]string{"7m": {}, "9m": {"EtcdBackupDeltasStale": {}}},
	},
	{
		name: "a delta goes missing at minute 5; the stream goes on",
		series: map[string]string{
			`clusterforge_etcd_backup_delta_last_flush_timestamp_seconds{job="etcd-backup",instance="10.0.1.10:2382"}`: "0+60x25",
			`clusterforge_etcd_backup_chain_breaks_total{job="etcd-backup",instance="10.0.1.10:2382"}`:                 "0x5 1x20",
		},
		fire: map[string]map[string]map[string]string{"4m": {}, "7m": {"EtcdBackupChainBroken": {}}, "20m": {}},
	},
	{
		name: "a wiped member refuses to bootstrap from minute 4",
		series: map[string]string{
			`clusterforge_etcd_backup_last_success_timestamp_seconds{job="etcd-backup",instance="10.0.1.10:2382"}`: "0+60x10",
			`clusterforge_etcd_backup_interval_seconds{job="etcd-backup",instance="10.0.1.10:2382"}`:               "240x10",
			`clusterforge_etcd_restore_needed{job="etcd-backup",instance="10.0.1.12:2382"}`:                        "0x3 1x6",
		},
		fire: map[string]map[string]map[string]string{"2m": {}, "5m": {"EtcdRestoreNeeded": {}}},
	},
}

// promtoolTests is promtool's unit test file for the scenarios; the expected alerts carry the
// rules' own labels and annotations.
func promtoolTests() map[string]any {
	rules := map[string]Rule{}
	for _, g := range AlertRules().Groups {
		for _, r := range g.Rules {
			rules[r.Alert] = r
		}
	}
	var tests []any
	for _, s := range alertScenarios {
		var series, checks []any
		for name, values := range s.series {
			series = append(series, map[string]any{"series": name, "values": values})
		}
		for at, firing := range s.fire {
			for alert, r := range rules {
				var exp []any
				if labels, ok := firing[alert]; ok {
					all := maps.Clone(labels)
					maps.Copy(all, r.Labels)
					exp = append(exp, map[string]any{"exp_labels": all, "exp_annotations": r.Annotations})
				}
				checks = append(checks, map[string]any{"eval_time": at, "alertname": alert, "exp_alerts": exp})
			}
		}
		tests = append(tests, map[string]any{"name": s.name, "interval": "1m", "input_series": series, "alert_rule_test": checks})
	}
	return map[string]any{"rule_files": []string{PrometheusRulesFile}, "evaluation_interval": "1m", "tests": tests}
}

func TestAlertsFireAndStayQuiet(t *testing.T) {
	dir := writePrometheusFiles(t, stacks(t)["dev"])
	data, err := yaml.Marshal(promtoolTests())
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "alerts_test.yml"), data, 0o644); err != nil {
		t.Fatal(err)
	}
	out := runPromtool(t, dir, "test", "rules", "alerts_test.yml")
	if !strings.Contains(out, "SUCCESS") {
		t.Fatalf("promtool test rules:\n%s", out)
	}
}
