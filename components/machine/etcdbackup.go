package machine

import (
	"encoding/json"
	"fmt"

	"github.com/clusterforge/clusterforge/components/pki"
	"github.com/clusterforge/clusterforge/components/spec"
	"github.com/clusterforge/clusterforge/components/wellknown"
)

// Paths of the main etcd's backup agent.
const (
	EtcdBackupBinary = BinDir + "/clusterforge-etcd-backup"
	EtcdBackupConfig = KubeDir + "/etcd-backup.json"
	// EtcdStatusFile holds "restore-needed: <why>" while this member refuses to start a new cluster.
	EtcdStatusFile = RunDir + "/etcd-status"
	// EtcdBackupUnit is the agent's unit name without .service: the rehearsal names its process so.
	EtcdBackupUnit = "clusterforge-etcd-backup"
)

// EtcdBackupStoreUnits are the main etcd's units that reach the backup store: the agent, and
// etcd-join when it asks whether the cluster may be bootstrapped.
var EtcdBackupStoreUnits = []string{EtcdBackupUnit + ".service", etcdJoinUnit}

// EtcdBackupSettings is clusterforge-etcd-backup's configuration file. Everything in it is the
// same on every member; the member's own address comes from NODE_IP.
type EtcdBackupSettings struct {
	// Cluster is the identity every stored object carries: "<cluster>/<etcd role>".
	Cluster string `json:"cluster"`
	// StoreURL is the blob container's URL. The agent authenticates with the VM's managed
	// identity, or with $AZURE_STORAGE_CONNECTION_STRING when set (the rehearsal's Azurite).
	StoreURL string `json:"storeURL"`
	// BirthsURL and RetirementsURL are the birth registry's containers (etcdbackup.Registry).
	BirthsURL      string `json:"birthsURL"`
	RetirementsURL string `json:"retirementsURL"`
	// Interval is the age at which the newest snapshot is replaced (spec backup.interval).
	Interval string `json:"interval"`
	// InitialCluster is every member's name=peerURL, for a restore.
	InitialCluster string `json:"initialCluster"`
	// ClientURLs are every member's client URL, for the gate's health checks.
	ClientURLs []string `json:"clientURLs"`
	CAFile     string   `json:"caFile"`
	CertFile   string   `json:"certFile"`
	KeyFile    string   `json:"keyFile"`
	DataDir    string   `json:"dataDir"`
	StatusFile string   `json:"statusFile"`
	Etcdutl    string   `json:"etcdutl"`
}

// EtcdBackupFor is the backup agent's configuration for one etcd cluster.
func EtcdBackupFor(c *spec.Cluster, e spec.EtcdCluster) EtcdBackupSettings {
	server := pki.EtcdServer(e.Role)
	return EtcdBackupSettings{
		Cluster: c.Name + "/" + e.Role, StoreURL: c.BackupStoreURL(), BirthsURL: c.BirthsURL(), RetirementsURL: c.RetirementsURL(),
		Interval:       c.Backup.Interval,
		InitialCluster: e.InitialCluster(), ClientURLs: e.ClientURLs(),
		CAFile: CertPath(etcdPKIDir, pki.EtcdCA(e.Role)), CertFile: CertPath(etcdPKIDir, server), KeyFile: KeyPath(etcdPKIDir, server),
		DataDir: EtcdDataDir, StatusFile: EtcdStatusFile, Etcdutl: BinDir + "/etcdutl",
	}
}

// EtcdBackupAgentFlags are the agent unit's flags: the member's own client URL and metrics address.
func EtcdBackupAgentFlags() Flags {
	return Flags{
		"config":          EtcdBackupConfig,
		"endpoint":        fmt.Sprintf("https://${NODE_IP}:%d", wellknown.EtcdClientPort),
		"metrics-address": fmt.Sprintf("${NODE_IP}:%d", wellknown.EtcdBackupMetricsPort),
	}
}

// etcdBackup is the main etcd's backup agent: its configuration and its unit, started before
// etcd-join so that a member refusing to bootstrap still reports why (restore-needed metric).
func etcdBackup(c *spec.Cluster, e spec.EtcdCluster) part {
	settings, err := json.MarshalIndent(EtcdBackupFor(c, e), "", "  ")
	if err != nil {
		panic(err) // strings only
	}
	return part{
		files: []File{{Path: EtcdBackupConfig, Content: string(settings) + "\n", Mode: 0o644}},
		units: []Unit{service{
			name: EtcdBackupUnit, description: "clusterforge: snapshot " + e.Role + " to Azure Blob Storage (L02)",
			after: []string{identityUnit}, requires: []string{identityUnit},
			binary: EtcdBackupBinary, subcommand: "agent", flags: EtcdBackupAgentFlags(), envFiles: []string{NodeEnvFile},
		}.unit()},
	}
}
