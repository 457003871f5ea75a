// Command clusterforge-etcd-backup keeps the main etcd's history in Azure Blob Storage (package
// etcdbackup). Every member runs the agent; the join step and the operators run the rest:
//
//	agent --endpoint URL --metrics-address ADDR   stream deltas, snapshot every interval while this member leads
//	snapshot --endpoint URL                       take, upload and verify a snapshot now
//	list                                          the stored snapshots, oldest first, and the deltas after the newest
//	may-bootstrap                                 exit 0 only if the store and the birth registry prove the cluster never existed
//	restore --name N --peer-url URL --token T [--snapshot S]   rebuild this member's data dir
//	replay                                        apply the deltas after the snapshot this member was restored from, once, before any apiserver starts
//	clear-stale --endpoint URL                    delete the apiserver leases a restore leaves stale
//	defrag [--min-free B --min-free-share S]      defragment the members worth it, followers first, behind the gate
//	gate                                          exit 0 only if it is safe to touch etcd now
//
// Each takes --config (machine.EtcdBackupConfig). The store is reached with the VM's managed
// identity, or with $AZURE_STORAGE_CONNECTION_STRING (etcdbackup.ConnectionStringEnv) when it is
// set (Azurite in the rehearsal).
// Retiring a cluster is an operator's act, with the operator's credentials: forge retire.
package main

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"log"
	"net"
	"net/http"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore"
	"github.com/Azure/azure-sdk-for-go/sdk/azidentity"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/clusterforge/clusterforge/components/etcdbackup"
	"github.com/clusterforge/clusterforge/components/machine"
)

const usage = "usage: clusterforge-etcd-backup agent|snapshot|list|may-bootstrap|restore|replay|clear-stale|defrag|gate --config FILE [flags]"

func main() {
	if err := run(os.Args[1:]); err != nil {
		fmt.Fprintln(os.Stderr, "clusterforge-etcd-backup:", err)
		os.Exit(1)
	}
}

func run(args []string) error {
	if len(args) == 0 {
		return errors.New(usage)
	}
	verb := args[0]
	fs := flag.NewFlagSet(verb, flag.ContinueOnError)
	config := fs.String("config", machine.EtcdBackupConfig, "configuration file")
	endpoint := fs.String("endpoint", "", "this member's client URL")
	metrics := fs.String("metrics-address", "", "host:port the agent serves /metrics on")
	name := fs.String("name", "", "restore: this member's etcd name")
	peerURL := fs.String("peer-url", "", "restore: this member's peer URL")
	token := fs.String("token", "", "restore: the restored cluster's new --initial-cluster-token")
	snapshot := fs.String("snapshot", "", "restore: the snapshot's name (default: the latest verified)")
	defrag := etcdbackup.DefaultDefragPolicy()
	fs.Int64Var(&defrag.MinFreeBytes, "min-free", defrag.MinFreeBytes, "defrag: bytes a member's database must have free to be defragmented")
	fs.Float64Var(&defrag.MinFreeShare, "min-free-share", defrag.MinFreeShare, "defrag: share of a member's database that must be free for it to be defragmented")
	if err := fs.Parse(args[1:]); err != nil {
		return err
	}
	cfg, err := loadConfig(*config)
	if err != nil {
		return err
	}
	interval, err := time.ParseDuration(cfg.Interval)
	if err != nil || interval <= 0 {
		return fmt.Errorf("%s: interval %q is not a positive Go duration such as \"3m\" (spec backup.interval)", *config, cfg.Interval)
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	store, registry, err := openStore(cfg)
	if err != nil {
		return err
	}
	logger := log.New(os.Stderr, "", log.LstdFlags|log.LUTC)
	switch verb {
	case "list":
		snaps, err := store.List(ctx)
		if err != nil {
			return err
		}
		for _, s := range snaps {
			fmt.Printf("%s\trevision=%d\tsize=%d\tsha256=%s\tverified=%s\n", s.Name, s.Revision, s.Size, s.SHA256, s.Verified.Format(time.RFC3339))
		}
		newest, err := store.Find(ctx, "")
		if errors.Is(err, etcdbackup.ErrNoVerifiedSnapshot) {
			fmt.Println("no verified snapshot yet: nothing to restore from")
			return nil
		}
		if err != nil {
			return err
		}
		deltas, err := store.Deltas(ctx)
		if err != nil {
			return err
		}
		chain, reached, broken := etcdbackup.Chain(newest.Revision, deltas)
		fmt.Printf("deltas after %s: %d, reaching revision %d", newest.Name, len(chain), reached)
		if len(chain) > 0 {
			fmt.Printf(", the last stored at %s", chain[len(chain)-1].Flushed.Format(time.RFC3339Nano))
		}
		if broken != nil {
			fmt.Printf("; %v", broken)
		}
		fmt.Println()
		return nil
	case "may-bootstrap":
		if err := etcdbackup.MayBootstrap(ctx, store, registry); err != nil {
			if werr := etcdbackup.WriteStatus(cfg.StatusFile, err.Error()); werr != nil {
				logger.Printf("write %s: %v", cfg.StatusFile, werr)
			}
			return err
		}
		logger.Printf("neither the store nor the birth registry knows %s: starting it as a new cluster", cfg.Cluster)
		return nil
	case "restore":
		if *name == "" || *peerURL == "" || *token == "" {
			return errors.New("restore needs --name, --peer-url and --token")
		}
		snap, err := store.Find(ctx, *snapshot)
		if err != nil {
			return err
		}
		member := etcdbackup.Member{Name: *name, PeerURL: *peerURL, InitialCluster: cfg.InitialCluster, Token: *token, DataDir: cfg.DataDir}
		if err := etcdbackup.RestoreMember(ctx, store, snap, member, cfg.Etcdutl); err != nil {
			return err
		}
		logger.Printf("restored %s from %s (revision %d, sha256 %s verified)", *name, snap.Name, snap.Revision, snap.SHA256)
		return nil
	}
	endpoints := cfg.ClientURLs
	if *endpoint != "" {
		endpoints = []string{*endpoint}
	}
	cli, err := etcdClient(cfg, endpoints)
	if err != nil {
		return err
	}
	defer cli.Close()
	switch verb {
	case "gate":
		if err := etcdbackup.SafeToTouch(ctx, cli, store, interval); err != nil {
			return err
		}
		fmt.Println("safe to touch etcd: every member healthy and a voter, no alarm, a verified snapshot younger than", cfg.Interval)
		return nil
	case "replay":
		restored, err := etcdbackup.ReadRestoreRecord(cfg.DataDir)
		if err != nil {
			return err
		}
		report, err := etcdbackup.Replay(ctx, cli, store, restored)
		if err != nil {
			return err
		}
		if report.Stopped != nil {
			logger.Printf("WARNING: the deltas end early; writes after revision %d are not restored", report.Reached)
		}
		logger.Printf("%s: %s", restored.Snapshot, report)
		return nil
	case "defrag":
		if defrag.MinFreeBytes < 0 || defrag.MinFreeShare < 0 || defrag.MinFreeShare > 1 {
			return errors.New("defrag: --min-free must be 0 or more and --min-free-share between 0 and 1")
		}
		steps, err := etcdbackup.Defragment(ctx, cli, store, interval, defrag)
		for _, s := range steps {
			logger.Printf("defragmentation: %s", s)
		}
		return err
	case "clear-stale":
		n, err := etcdbackup.ClearStale(ctx, cli)
		logger.Printf("cleared %d stale keys (master leases, apiserver identity leases)", n)
		return err
	}
	if *endpoint == "" {
		return fmt.Errorf("%s needs --endpoint, this member's client URL", verb)
	}
	agent := &etcdbackup.Agent{Etcd: cli, Endpoint: *endpoint, Store: store, Registry: registry, Interval: interval,
		Retention: etcdbackup.DefaultRetention(), StatusFile: cfg.StatusFile, DataDir: cfg.DataDir, Log: logger}
	switch verb {
	case "snapshot":
		_, err := agent.Snapshot(ctx)
		return err
	case "agent":
		if *metrics == "" {
			return errors.New("agent needs --metrics-address")
		}
		ln, err := net.Listen("tcp", *metrics)
		if err != nil {
			return err
		}
		mux := http.NewServeMux()
		mux.Handle("/metrics", agent)
		go func() { _ = http.Serve(ln, mux) }()
		logger.Printf("backing up %s to %s every %s while this member leads; metrics on %s", cfg.Cluster, cfg.StoreURL, interval, *metrics)
		agent.Run(ctx)
		return nil
	}
	return fmt.Errorf("unknown verb %q; %s", verb, usage)
}

func loadConfig(path string) (machine.EtcdBackupSettings, error) {
	var cfg machine.EtcdBackupSettings
	data, err := os.ReadFile(path)
	if err != nil {
		return cfg, err
	}
	if err := json.Unmarshal(data, &cfg); err != nil {
		return cfg, fmt.Errorf("%s: %w", path, err)
	}
	return cfg, nil
}

// openStore reaches the backup store and the birth registry with the VM's managed identity (the
// etcd machines have exactly one, so none needs naming), or etcdbackup.ConnectionStringEnv.
func openStore(cfg machine.EtcdBackupSettings) (*etcdbackup.Store, *etcdbackup.Registry, error) {
	managed := func() (azcore.TokenCredential, error) { return azidentity.NewManagedIdentityCredential(nil) }
	return etcdbackup.Open(cfg.Cluster, cfg.StoreURL, cfg.BirthsURL, cfg.RetirementsURL, managed)
}

func etcdClient(cfg machine.EtcdBackupSettings, endpoints []string) (*clientv3.Client, error) {
	pair, err := tls.LoadX509KeyPair(cfg.CertFile, cfg.KeyFile)
	if err != nil {
		return nil, err
	}
	caPEM, err := os.ReadFile(cfg.CAFile)
	if err != nil {
		return nil, err
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(caPEM) {
		return nil, fmt.Errorf("%s holds no certificate", cfg.CAFile)
	}
	return clientv3.New(clientv3.Config{
		Endpoints: endpoints, DialTimeout: 5 * time.Second, Logger: zap.NewNop(),
		TLS: &tls.Config{Certificates: []tls.Certificate{pair}, RootCAs: pool, MinVersion: tls.VersionTLS12},
	})
}
