// Command clusterforge-csr-approver approves kubelet serving certificates whose names are the
// requesting node's own (package csrapprover). The apiserver machines run it, one leader at a time.
// Every one, leader or not, also serves its machine's certificate expiry (package certexpiry).
package main

import (
	"context"
	"flag"
	"fmt"
	"net/http"
	"net/netip"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/clusterforge/clusterforge/components/certexpiry"
	"github.com/clusterforge/clusterforge/components/csrapprover"
)

func main() {
	kubeconfig := flag.String("kubeconfig", "", "kubeconfig of the approver's identity")
	subnet := flag.String("node-subnet", "", "CIDR every serving certificate's addresses must lie in")
	identity := flag.String("identity", "", "this candidate's name in the leader election (default: the host name)")
	lease := flag.String("lease", "clusterforge-csr-approver", "leader election lease in kube-system")
	metrics := flag.String("metrics-address", "", "host:port to serve certificate expiry on (/metrics); empty: none")
	certDir := flag.String("certificates-dir", "", "directory of this machine's certificate files (*.crt) to report")
	endpoints := flag.String("certificate-endpoints", "", "comma-separated host:port of TLS servers whose certificates to report")
	flag.Parse()
	if *metrics != "" {
		source := certexpiry.Source{Dir: *certDir}
		if *endpoints != "" {
			source.Endpoints = strings.Split(*endpoints, ",")
		}
		srv := &http.Server{Addr: *metrics, Handler: certexpiry.Handler(source), ReadHeaderTimeout: 10 * time.Second}
		go func() {
			if err := srv.ListenAndServe(); err != nil {
				fmt.Fprintln(os.Stderr, "clusterforge-csr-approver: metrics:", err)
				os.Exit(1)
			}
		}()
	}
	if err := run(*kubeconfig, *subnet, *identity, *lease); err != nil {
		fmt.Fprintln(os.Stderr, "clusterforge-csr-approver:", err)
		os.Exit(1)
	}
}

func run(kubeconfig, subnet, identity, lease string) error {
	prefix, err := netip.ParsePrefix(subnet)
	if err != nil {
		return fmt.Errorf("--node-subnet: %w", err)
	}
	if identity == "" {
		if identity, err = os.Hostname(); err != nil {
			return err
		}
	}
	cfg, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
	if err != nil {
		return err
	}
	client, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return err
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	return csrapprover.Run(ctx, csrapprover.Config{Client: client, NodeSubnet: prefix.Masked(), Identity: identity, Lease: lease})
}
