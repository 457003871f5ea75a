package wellknown

// Ports the machines listen on; production and rehearsal alike.
const (
	EtcdClientPort  = 2379
	EtcdPeerPort    = 2380
	EtcdMetricsPort = 2381
	APIServerPort   = 6443
	// ControllerManagerPort and SchedulerPort are the components' default secure (health) ports.
	ControllerManagerPort = 10257
	SchedulerPort         = 10259
	KubeletPort           = 10250
	SSHPort               = 22
	// EtcdBackupMetricsPort is where the main etcd members' backup agent serves its metrics.
	EtcdBackupMetricsPort = 2382
	// CertificateMetricsPort is where each apiserver machine's clusterforge-csr-approver serves
	// certificate expiry: its own files and what every etcd member presents.
	CertificateMetricsPort = 2383
	// NodeExporterPort is node-exporter's, on every worker's host network.
	NodeExporterPort = 9100
	// TrafficMetricsPort is where each worker's clusterforge-ops agent serves its pods' traffic
	// counters (L32), on the host network.
	TrafficMetricsPort = 9102
	// OpsWebhookPort is where the clusterforge-ops controller serves its webhooks and metrics.
	OpsWebhookPort = 9443
)
