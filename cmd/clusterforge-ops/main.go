// Command clusterforge-ops is the fleet operations layer (docs/design/fleet-operations.md), one
// binary in three roles:
//
//	clusterforge-ops controller   the Deployment: the scale-down brake and team toleration webhooks
//	                              (every replica), remediation, team taints and the gang-room
//	                              gate (the leader)
//	clusterforge-ops agent        the DaemonSet: its own node's preflight tests and scheduled events
//	clusterforge-ops retest       the CronJob: idle GPU nodes back under preflight
//
// Every role reads its flags, then works until SIGTERM.
package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	// The image holds this binary alone: Entra ID's and Resource Manager's certificates verify
	// against Mozilla's roots built in (SSL_CERT_FILE, when set, is read instead).
	_ "golang.org/x/crypto/x509roots/fallback"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/clusterforge/clusterforge/components/watchlist"
)

func main() {
	watchlist.Install() // informers stream their initial state (docs/design/large-cluster-settings.md)
	if len(os.Args) < 2 {
		fmt.Fprintln(os.Stderr, "usage: clusterforge-ops controller|agent|retest [flags]")
		os.Exit(2)
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	var err error
	switch role, args := os.Args[1], os.Args[2:]; role {
	case "controller":
		err = controller(ctx, args)
	case "agent":
		err = agent(ctx, args)
	case "retest":
		err = retest(ctx, args)
	default:
		err = fmt.Errorf("unknown role %q: use controller, agent or retest", role)
	}
	if err != nil && ctx.Err() == nil {
		fmt.Fprintf(os.Stderr, "clusterforge-ops %s: %v\n", os.Args[1], err)
		os.Exit(1)
	}
}

// client is the in-cluster client, or kubeconfig's when given (tests, operators), with tune's
// settings when given.
func client(kubeconfig string, tune func(*rest.Config)) (*kubernetes.Clientset, error) {
	var cfg *rest.Config
	var err error
	if kubeconfig != "" {
		cfg, err = clientcmd.BuildConfigFromFlags("", kubeconfig)
	} else {
		cfg, err = rest.InClusterConfig()
	}
	if err != nil {
		return nil, err
	}
	if tune != nil {
		tune(cfg)
	}
	return kubernetes.NewForConfig(cfg)
}
