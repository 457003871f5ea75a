package wellknown

// Metric names the binaries export and the alerts read.
const (
	// The etcd backup agent's (clusterforge-etcd-backup).
	EtcdBackupLastSuccessMetric   = "clusterforge_etcd_backup_last_success_timestamp_seconds"
	EtcdBackupFailuresMetric      = "clusterforge_etcd_backup_failures_total"
	EtcdBackupIntervalMetric      = "clusterforge_etcd_backup_interval_seconds"
	EtcdRestoreNeededMetric       = "clusterforge_etcd_restore_needed"
	EtcdBackupDeltaFlushedMetric  = "clusterforge_etcd_backup_delta_last_flush_timestamp_seconds"
	EtcdBackupChainBreaksMetric   = "clusterforge_etcd_backup_chain_breaks_total"
	EtcdBackupDeltaRevisionMetric = "clusterforge_etcd_backup_delta_revision"
	EtcdBackupChainVerifiedMetric = "clusterforge_etcd_backup_chain_verified_revision"
	// Certificate expiry, served by clusterforge-csr-approver on each apiserver machine.
	CertificateExpiryMetric     = "clusterforge_certificate_expiry_timestamp_seconds"
	CertificateReadErrorsMetric = "clusterforge_certificate_read_errors"
	// AzureSignedInMetric is 1 while a clusterforge-ops replica reads its worker scale sets through
	// Resource Manager with its workload identity.
	AzureSignedInMetric = "clusterforge_ops_azure_signed_in"
	// APIServerRepairsSuspendedMetric is 1 while the apiserver scale set's automatic repairs are
	// suspended, 0 while they run, as a clusterforge-ops replica reads them.
	APIServerRepairsSuspendedMetric = "clusterforge_apiserver_repairs_suspended"
	// BrakeRefusalsMetric counts the node removals the scale-down brake refused, by scope.
	BrakeRefusalsMetric = "clusterforge_brake_refusals_total"
	// PodNetworkBytesMetric is the node agent's byte counter per pod and direction (L32).
	PodNetworkBytesMetric = "clusterforge_pod_network_bytes_total"
)
