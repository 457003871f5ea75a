package addons

import (
	"fmt"
	"strconv"
	"strings"

	"sigs.k8s.io/yaml"

	"github.com/clusterforge/clusterforge/components/spec"
	"github.com/clusterforge/clusterforge/components/wellknown"
)

// The subset of Prometheus' configuration clusterforge writes; promtool checks the result.
type (
	// PrometheusConfig is prometheus.yml.
	PrometheusConfig struct {
		Global        GlobalConfig   `json:"global"`
		RuleFiles     []string       `json:"rule_files"`
		ScrapeConfigs []ScrapeConfig `json:"scrape_configs"`
	}
	// GlobalConfig holds the defaults of every job.
	GlobalConfig struct {
		ScrapeInterval     string            `json:"scrape_interval"`
		EvaluationInterval string            `json:"evaluation_interval"`
		ExternalLabels     map[string]string `json:"external_labels,omitempty"`
	}
	// ScrapeConfig is one job.
	ScrapeConfig struct {
		JobName              string               `json:"job_name"`
		Scheme               string               `json:"scheme,omitempty"`
		StaticConfigs        []StaticConfig       `json:"static_configs,omitempty"`
		KubernetesSDConfigs  []KubernetesSDConfig `json:"kubernetes_sd_configs,omitempty"`
		Authorization        *Authorization       `json:"authorization,omitempty"`
		TLSConfig            *TLSConfig           `json:"tls_config,omitempty"`
		RelabelConfigs       []RelabelConfig      `json:"relabel_configs,omitempty"`
		MetricRelabelConfigs []RelabelConfig      `json:"metric_relabel_configs,omitempty"`
	}
	// StaticConfig is a fixed target list.
	StaticConfig struct {
		Targets []string          `json:"targets"`
		Labels  map[string]string `json:"labels,omitempty"`
	}
	// KubernetesSDConfig discovers targets from the API: one watch per Prometheus, not per node (L07).
	KubernetesSDConfig struct {
		Role       string         `json:"role"`
		Namespaces *NamespaceList `json:"namespaces,omitempty"`
	}
	// NamespaceList limits discovery to namespaces.
	NamespaceList struct {
		Names []string `json:"names"`
	}
	// Authorization sends a bearer token read from a file.
	Authorization struct {
		CredentialsFile string `json:"credentials_file"`
	}
	// TLSConfig verifies the target.
	TLSConfig struct {
		CAFile     string `json:"ca_file"`
		ServerName string `json:"server_name,omitempty"`
	}
	// RelabelConfig rewrites or drops targets and series.
	RelabelConfig struct {
		SourceLabels []string `json:"source_labels,omitempty"`
		Regex        string   `json:"regex,omitempty"`
		Action       string   `json:"action,omitempty"`
		TargetLabel  string   `json:"target_label,omitempty"`
		Replacement  string   `json:"replacement,omitempty"`
	}
	// RuleFile is a Prometheus rule file.
	RuleFile struct {
		Groups []RuleGroup `json:"groups"`
	}
	// RuleGroup is a named group of rules.
	RuleGroup struct {
		Name  string `json:"name"`
		Rules []Rule `json:"rules"`
	}
	// Rule is one alerting rule.
	Rule struct {
		Alert       string            `json:"alert"`
		Expr        string            `json:"expr"`
		For         string            `json:"for,omitempty"`
		Labels      map[string]string `json:"labels"`
		Annotations map[string]string `json:"annotations"`
	}
)

// Files Prometheus reads, in its ConfigMap.
const (
	PrometheusConfigDir  = "/etc/prometheus"
	PrometheusConfigFile = "prometheus.yml"
	PrometheusRulesFile  = "alerts.yml"
	// OpsCAFile is the authority of clusterforge-ops's serving certificate, known at deploy time
	// (TrustOpsCA): the pods' own CA file is the cluster CA's, which does not sign it.
	OpsCAFile         = "ops-ca.crt"
	serviceAccountDir = "/var/run/secrets/kubernetes.io/serviceaccount"
)

// DroppedSeries are the metric name patterns each job drops at ingestion (L34): per-bucket
// histograms nobody graphs and debugging series whose cardinality grows with the cluster. The
// alerts' own series are never among them (TestDroppedSeriesSpareAlerts).
var DroppedSeries = map[string][]string{
	"apiserver": {
		"apiserver_request_(slo|sli)_duration_seconds_bucket", // duplicates apiserver_request_duration_seconds
		"apiserver_response_sizes_bucket",
		"apiserver_watch_events_sizes_bucket",
		"apiserver_admission_(controller|step|webhook)_admission_duration_seconds_bucket",
		"apiserver_flowcontrol_(priority_level|request)_.*_seconds_bucket",
		"etcd_request_duration_seconds_bucket", // per resource type × operation × bucket
		"workqueue_(queue|work)_duration_seconds_bucket",
		"rest_client_(rate_limiter|request)_duration_seconds_bucket",
	},
	"etcd": {
		"etcd_debugging_(mvcc|store|lease|snap|auth|disk)_.*", // keeps etcd_debugging_server_alarms
		"grpc_server_msg_(received|sent)_total",
		"grpc_server_handling_seconds_bucket",
	},
	"node": {
		"node_(scrape_collector|softnet|cpu_guest|arp_entries|netstat_Icmp6|netstat_Ip6|nf_conntrack_stat)_.*",
		"node_filesystem_(files|files_free|device_error|readonly)",
		"node_network_(transmit|receive)_(compressed|fifo|frame|multicast|carrier|colls)_.*",
	},
	"coredns": {
		"coredns_dns_(request|response)_size_bytes_bucket",
	},
}

func dropSeries(job string) []RelabelConfig {
	return []RelabelConfig{{SourceLabels: []string{"__name__"}, Regex: strings.Join(DroppedSeries[job], "|"), Action: "drop"}}
}

// PrometheusConfigFor scrapes the apiservers (found through the `kubernetes` Service's
// EndpointSlices), both etcd clusters (static: their members have fixed addresses), CoreDNS and
// every node's exporter, each job dropping its DroppedSeries (L06, L34).
func PrometheusConfigFor(c *spec.Cluster) PrometheusConfig {
	saToken := &Authorization{CredentialsFile: serviceAccountDir + "/token"}
	var etcd []StaticConfig
	for _, e := range c.EtcdClusters() {
		sc := StaticConfig{Labels: map[string]string{"etcd_cluster": e.Role}}
		for _, m := range e.Members {
			sc.Targets = append(sc.Targets, fmt.Sprintf("%s:%d", m.IP, wellknown.EtcdMetricsPort))
		}
		etcd = append(etcd, sc)
	}
	backupAgents := StaticConfig{Labels: map[string]string{"etcd_cluster": spec.RoleEtcdMain}}
	for _, m := range c.EtcdClusters()[0].Members {
		backupAgents.Targets = append(backupAgents.Targets, fmt.Sprintf("%s:%d", m.IP, wellknown.EtcdBackupMetricsPort))
	}
	keep := func(label, regex string) RelabelConfig {
		return RelabelConfig{SourceLabels: []string{label}, Regex: regex, Action: "keep"}
	}
	return PrometheusConfig{
		Global:    GlobalConfig{ScrapeInterval: "30s", EvaluationInterval: "30s", ExternalLabels: map[string]string{"cluster": c.Name}},
		RuleFiles: []string{PrometheusConfigDir + "/" + PrometheusRulesFile},
		ScrapeConfigs: []ScrapeConfig{
			{
				JobName: "apiserver", Scheme: "https", Authorization: saToken,
				TLSConfig:            &TLSConfig{CAFile: serviceAccountDir + "/ca.crt", ServerName: "kubernetes"},
				KubernetesSDConfigs:  []KubernetesSDConfig{{Role: "endpointslice", Namespaces: &NamespaceList{Names: []string{"default"}}}},
				RelabelConfigs:       []RelabelConfig{keep("__meta_kubernetes_service_name", "kubernetes"), keep("__meta_kubernetes_endpointslice_port_name", "https")},
				MetricRelabelConfigs: dropSeries("apiserver"),
			},
			{
				// Each apiserver machine's certificate expiry, served by its clusterforge-csr-approver.
				JobName: "certificates", Scheme: "http",
				KubernetesSDConfigs: []KubernetesSDConfig{{Role: "endpointslice", Namespaces: &NamespaceList{Names: []string{"default"}}}},
				RelabelConfigs: []RelabelConfig{keep("__meta_kubernetes_service_name", "kubernetes"), keep("__meta_kubernetes_endpointslice_port_name", "https"),
					{SourceLabels: []string{"__address__"}, Regex: `(.+):\d+`, TargetLabel: "__address__", Replacement: fmt.Sprintf("${1}:%d", wellknown.CertificateMetricsPort)}},
			},
			{JobName: "etcd", Scheme: "http", StaticConfigs: etcd, MetricRelabelConfigs: dropSeries("etcd")},
			{JobName: "etcd-backup", Scheme: "http", StaticConfigs: []StaticConfig{backupAgents}},
			{
				JobName:              "coredns",
				KubernetesSDConfigs:  []KubernetesSDConfig{{Role: "endpointslice", Namespaces: &NamespaceList{Names: []string{SystemNamespace}}}},
				RelabelConfigs:       []RelabelConfig{keep("__meta_kubernetes_service_name", DNSService), keep("__meta_kubernetes_endpointslice_port_name", "metrics")},
				MetricRelabelConfigs: dropSeries("coredns"),
			},
			{
				// clusterforge-ops's replicas: the scale-down brake's refusals (L14).
				JobName: wellknown.OpsName, Scheme: "https",
				TLSConfig:           &TLSConfig{CAFile: PrometheusConfigDir + "/" + OpsCAFile, ServerName: wellknown.OpsName + "." + SystemNamespace + ".svc"},
				KubernetesSDConfigs: []KubernetesSDConfig{{Role: "endpointslice", Namespaces: &NamespaceList{Names: []string{SystemNamespace}}}},
				RelabelConfigs:      []RelabelConfig{keep("__meta_kubernetes_service_name", wellknown.OpsName), keep("__meta_kubernetes_endpointslice_port_name", "https")},
			},
			onEveryNode("node", wellknown.NodeExporterPort, dropSeries("node")),
			// The ops agents' per-pod byte counters (L32).
			onEveryNode(PodTrafficJob, wellknown.TrafficMetricsPort, nil),
		},
	}
}

// PodTrafficJob scrapes every worker's pod traffic counters.
const PodTrafficJob = "pod-traffic"

// onEveryNode is a job scraping port on every node's host network, found through the API's nodes.
func onEveryNode(job string, port int, drop []RelabelConfig) ScrapeConfig {
	return ScrapeConfig{
		JobName:             job,
		KubernetesSDConfigs: []KubernetesSDConfig{{Role: "node"}},
		RelabelConfigs: []RelabelConfig{{SourceLabels: []string{"__address__"}, Regex: `(.+):\d+`,
			TargetLabel: "__address__", Replacement: fmt.Sprintf("${1}:%d", port)}},
		MetricRelabelConfigs: drop,
	}
}

// AlertRules fire on the apiservers' throttling (429) and server errors (5xx) as a share of all
// requests (L10), on etcd's NOSPACE alarm and its approach (L04), on the main etcd's backups:
// too old, failing, or a member waiting for a restore (L02), and on the scale-down brake holding
// back removals (L14).
func AlertRules() RuleFile {
	ratio := func(codes string) string {
		return fmt.Sprintf(`sum(rate(apiserver_request_total{job="apiserver",code=~"%s"}[5m])) / sum(rate(apiserver_request_total{job="apiserver"}[5m]))`, codes)
	}
	runbook := "docs/runbooks/etcd.md"
	return RuleFile{Groups: []RuleGroup{
		{Name: "apiserver", Rules: []Rule{
			{Alert: "APIServerThrottling", Expr: ratio("429") + " > 0.01", For: "5m",
				Labels: map[string]string{"severity": "warning"},
				Annotations: map[string]string{"summary": "More than 1% of API requests are throttled (HTTP 429)",
					"description": "Clients are hitting max-requests-inflight or API priority and fairness; find the LIST storm in the audit log (L06, L10)."}},
			{Alert: "APIServerErrors", Expr: ratio("5..") + " > 0.01", For: "5m",
				Labels: map[string]string{"severity": "critical"},
				Annotations: map[string]string{"summary": "More than 1% of API requests fail with 5xx",
					"description": "The apiservers or etcd are failing requests (L10)."}},
		}},
		{Name: "etcd", Rules: []Rule{
			{Alert: "EtcdNoSpace", Expr: `max by (etcd_cluster, instance) (etcd_debugging_server_alarms{job="etcd",alarm_type="NOSPACE"}) > 0`,
				Labels: map[string]string{"severity": "critical"},
				Annotations: map[string]string{"summary": "etcd raised NOSPACE: the cluster accepts no writes",
					"runbook": runbook}},
			{Alert: "EtcdBackendNearQuota", Expr: `etcd_mvcc_db_total_size_in_bytes{job="etcd"} / etcd_server_quota_backend_bytes{job="etcd"} > 0.8`, For: "10m",
				Labels: map[string]string{"severity": "warning"},
				Annotations: map[string]string{"summary": "etcd's database is above 80% of its backend quota",
					"description": "Compact and defragment before NOSPACE stops writes (L04).", "runbook": runbook}},
		}},
		{Name: "certificates", Rules: []Rule{
			{Alert: "CertificateExpiringSoon", Expr: `min by (source, subject) (` + wellknown.CertificateExpiryMetric + `{job="certificates"}) - time() < ` + strconv.Itoa(int(spec.CertificateRenewBefore.Seconds())),
				Labels: map[string]string{"severity": "warning"},
				Annotations: map[string]string{"summary": "A control-plane certificate expires within 30 days",
					"description": "Renew it onto the machines: `make diff` lists it, `make roll` renews leaves due within 30 days (docs/operations/rolling-update.md)."}},
			{Alert: "CertificateUnreadable", Expr: `max(` + wellknown.CertificateReadErrorsMetric + `{job="certificates"}) > 0`, For: "15m",
				Labels: map[string]string{"severity": "warning"},
				Annotations: map[string]string{"summary": "An apiserver machine cannot read one of the certificates it reports",
					"description": "A certificate file is unreadable or an etcd member presents none: its expiry is not watched."}},
		}},
		{Name: "fleet", Rules: []Rule{
			{Alert: "ScaleDownBrakeEngaged", Expr: `sum by (scope) (increase(` + wellknown.BrakeRefusalsMetric + `{job="` + wellknown.OpsName + `"}[10m])) > 0`,
				Labels: map[string]string{"severity": "warning"},
				Annotations: map[string]string{"summary": "The scale-down brake refused node removals in the last 10 minutes",
					"description": "Something wants to remove more than half of a pool (or of the cluster) at once: a fleet-wide failure, a bad health check or a runaway autoscaler. Find out which before removing more (L14, docs/operations/fleet-operations.md)."}},
			{Alert: "AzureSignInFailing", Expr: `min(` + wellknown.AzureSignedInMetric + `{job="` + wellknown.OpsName + `"}) == 0`, For: "10m",
				Labels: map[string]string{"severity": "critical"},
				Annotations: map[string]string{"summary": "A clusterforge-ops replica cannot read its worker scale sets through its workload identity",
					"description": "Remediation cannot hand broken machines back, and cluster-autoscaler, federated the same way, likely cannot scale. Its log names Entra ID's or Resource Manager's answer: check the issuer's public container, the federated credentials, the service-account key and the identity's role assignments (docs/operations/credentials.md)."}},
			{Alert: "APIServerRepairsSuspended", Expr: `max(` + wellknown.APIServerRepairsSuspendedMetric + `{job="` + wellknown.OpsName + `"}) == 1`, For: "30m",
				Labels: map[string]string{"severity": "warning"},
				Annotations: map[string]string{"summary": "The apiserver scale set's automatic repairs have been suspended for 30 minutes",
					"description": "A dead apiserver stays dead until someone resumes them. A restore or a roll suspends them for its duration; Azure suspends them itself after repairs that did not help. Resume them once the apiservers are healthy (docs/runbooks/etcd.md), or find out why repaired apiservers stayed unhealthy (L05)."}},
		}},
		{Name: "etcd-backup", Rules: []Rule{
			{Alert: "EtcdBackupStale", Expr: `time() - max(` + wellknown.EtcdBackupLastSuccessMetric + `{job="etcd-backup"}) > 2 * max(` + wellknown.EtcdBackupIntervalMetric + `{job="etcd-backup"})`,
				Labels: map[string]string{"severity": "critical"},
				Annotations: map[string]string{"summary": "The main etcd's newest verified snapshot is older than twice the backup interval",
					"description": "The recovery point is growing: check the backup agents' logs and the store (L02).", "runbook": runbook}},
			{Alert: "EtcdBackupFailing", Expr: `sum(increase(` + wellknown.EtcdBackupFailuresMetric + `{job="etcd-backup"}[10m])) > 0`,
				Labels: map[string]string{"severity": "warning"},
				Annotations: map[string]string{"summary": "A snapshot or its upload to the backup store failed in the last 10 minutes",
					"runbook": runbook}},
			{Alert: "EtcdBackupDeltasStale", Expr: `time() - max(` + wellknown.EtcdBackupDeltaFlushedMetric + `{job="etcd-backup"}) > 60`, For: "2m",
				Labels: map[string]string{"severity": "critical"},
				Annotations: map[string]string{"summary": "No agent has stored a delta of the main etcd for over a minute",
					"description": "The apiservers write every few seconds, so the stream has stopped: writes since then are protected only by the last snapshot. Check the leader's backup agent and the store.", "runbook": runbook}},
			{Alert: "EtcdBackupChainBroken", Expr: `sum(increase(` + wellknown.EtcdBackupChainBreaksMetric + `{job="etcd-backup"}[10m])) > 0`,
				Labels: map[string]string{"severity": "warning"},
				Annotations: map[string]string{"summary": "The main etcd's delta chain broke in the last 10 minutes; the agent took a snapshot at once",
					"description": "A delta went missing or corrupt, or etcd compacted revisions before the agent watched them: a restore to a point before that snapshot cannot go past the break. The agent's log names it.", "runbook": runbook}},
			{Alert: "EtcdRestoreNeeded", Expr: `max(` + wellknown.EtcdRestoreNeededMetric + `{job="etcd-backup"}) > 0`,
				Labels: map[string]string{"severity": "critical"},
				Annotations: map[string]string{"summary": "An etcd-main member has an empty data dir, no quorum answers, and the store shows the cluster existed",
					"description": "It waits instead of starting an empty cluster. If a majority lost their disks, restore (make etcd-restore).", "runbook": runbook}},
		}},
	}}
}

// PrometheusFiles are prometheus.yml and the rule file, as Prometheus reads them.
func PrometheusFiles(c *spec.Cluster) (map[string]string, error) {
	cfg, err := yaml.Marshal(PrometheusConfigFor(c))
	if err != nil {
		return nil, err
	}
	rules, err := yaml.Marshal(AlertRules())
	if err != nil {
		return nil, err
	}
	return map[string]string{PrometheusConfigFile: string(cfg), PrometheusRulesFile: string(rules)}, nil
}
