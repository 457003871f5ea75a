// Command clusterforge-node-join gets a new worker's kubelet its client certificate, proving
// with Azure's attested document which instance it is (package nodejoin). It runs once per boot,
// before the kubelet, and does nothing once the kubelet holds a valid certificate; with --renew
// it keeps that certificate fresh, proving the instance again each time.
package main

import (
	"context"
	"flag"
	"fmt"
	"log"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/clusterforge/clusterforge/components/nodejoin"
)

func main() {
	cfg := nodejoin.Config{Logf: log.Printf}
	flag.StringVar(&cfg.NodeName, "node-name", "", "the node's name, its instance's computer name")
	flag.StringVar(&cfg.ProviderID, "provider-id", "", "the instance's provider ID (azure://<resource id>)")
	flag.StringVar(&cfg.Metadata, "metadata-endpoint", "", "the instance metadata service's base URL")
	flag.StringVar(&cfg.BootstrapKubeconfig, "bootstrap-kubeconfig", "", "kubeconfig with the join token")
	flag.StringVar(&cfg.Kubeconfig, "kubeconfig", "", "the kubelet's kubeconfig to write")
	flag.StringVar(&cfg.ClientCert, "client-cert", "", "the kubelet's current client certificate and key (a link to a dated file beside it)")
	flag.DurationVar(&cfg.Retry, "retry", 30*time.Second, "wait between attempts")
	renew := flag.Bool("renew", false, "renew the kubelet's client certificate whenever half of its life is left, until stopped")
	renewNow := flag.Bool("renew-now", false, "renew the kubelet's client certificate once, now, and exit")
	flag.Parse()
	if cfg.NodeName == "" || cfg.Metadata == "" || cfg.ProviderID == "" {
		fmt.Fprintln(os.Stderr, "clusterforge-node-join: --node-name, --metadata-endpoint and --provider-id are required")
		os.Exit(2)
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	run := nodejoin.Join
	switch {
	case *renew:
		run = nodejoin.Renew
	case *renewNow:
		run = nodejoin.RenewNow
	}
	if err := run(ctx, cfg); err != nil {
		fmt.Fprintln(os.Stderr, "clusterforge-node-join:", err)
		os.Exit(1)
	}
}
