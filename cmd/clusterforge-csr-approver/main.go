// Command clusterforge-csr-approver approves the client certificates of nodes joining as their
// own Azure instance, and kubelet serving certificates whose names are the requesting node's own
// (package csrapprover). The apiserver machines run it, one leader at a time.
// Every one, leader or not, also serves its machine's certificate expiry (package certexpiry).
package main

import (
	"context"
	"crypto/x509"
	"errors"
	"flag"
	"fmt"
	"net/http"
	"net/netip"
	"os"
	"os/signal"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore/policy"
	"github.com/Azure/azure-sdk-for-go/sdk/azidentity"

	// Mozilla's roots, where the machine has none, to check attested documents' signers.
	_ "golang.org/x/crypto/x509roots/fallback"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/clusterforge/clusterforge/components/attestation"
	"github.com/clusterforge/clusterforge/components/azurecloud"
	"github.com/clusterforge/clusterforge/components/certexpiry"
	"github.com/clusterforge/clusterforge/components/csrapprover"
	"github.com/clusterforge/clusterforge/components/ops/scaleset"
	"github.com/clusterforge/clusterforge/components/watchlist"
)

func main() {
	watchlist.Install() // informers stream their initial state (docs/design/large-cluster-settings.md)
	kubeconfig := flag.String("kubeconfig", "", "kubeconfig of the approver's identity")
	subnets := flag.String("node-subnets", "", "comma-separated CIDRs one of which holds every serving certificate's addresses")
	identity := flag.String("identity", "", "this candidate's name in the leader election (default: the host name)")
	lease := flag.String("lease", "clusterforge-csr-approver", "leader election lease in kube-system")
	metrics := flag.String("metrics-address", "", "host:port to serve certificate expiry on (/metrics); empty: none")
	certDir := flag.String("certificates-dir", "", "directory of this machine's certificate files (*.crt) to report")
	endpoints := flag.String("certificate-endpoints", "", "comma-separated host:port of TLS servers whose certificates to report")
	providerID := flag.String("provider-id", "", "this machine's provider ID (azure://<resource id>), naming the cluster's subscription and resource group")
	images := flag.String("worker-image-definitions", "", "comma-separated gallery image definition ids whose versions a joining worker's instance must boot")
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
	joins, workers, err := newJoins(*providerID, *images)
	if err != nil {
		fmt.Fprintln(os.Stderr, "clusterforge-csr-approver:", err)
		os.Exit(2)
	}
	if err := run(*kubeconfig, *subnets, *identity, *lease, joins, workers); err != nil {
		fmt.Fprintln(os.Stderr, "clusterforge-csr-approver:", err)
		os.Exit(1)
	}
}

// newJoins reaches the worker scale sets through Resource Manager with the machine's managed
// identity, in the cloud AZURE_ENVIRONMENT_FILEPATH describes (Azure's public cloud without it),
// for joins, placement labels and serving addresses, and trusts attested documents signed under the system's roots.
func newJoins(providerID, images string) (*csrapprover.Joins, *csrapprover.WorkerInstances, error) {
	self, err := scaleset.ParseProviderID(providerID)
	if err != nil {
		return nil, nil, fmt.Errorf("--provider-id: %w", err)
	}
	definitions := slices.DeleteFunc(strings.Split(images, ","), func(d string) bool { return d == "" })
	if len(definitions) == 0 {
		return nil, nil, errors.New("--worker-image-definitions: give the worker pools' image definitions, or no worker joins")
	}
	cloud := azurecloud.Public
	if file := os.Getenv(azurecloud.FileEnv); file != "" {
		if cloud, err = azurecloud.Read(file); err != nil {
			return nil, nil, err
		}
	}
	cred, err := azidentity.NewManagedIdentityCredential(&azidentity.ManagedIdentityCredentialOptions{ClientOptions: policy.ClientOptions{Cloud: cloud.SDK()}})
	if err != nil {
		return nil, nil, err
	}
	roots, err := x509.SystemCertPool()
	if err != nil {
		return nil, nil, err
	}
	workers := &csrapprover.WorkerInstances{Cred: cred, ControlPlane: self.ScaleSet, Images: definitions,
		Access: &scaleset.Access{Cloud: cloud, Subscription: self.Subscription, ResourceGroup: self.ResourceGroup}}
	return &csrapprover.Joins{
		Attested: attestation.Verifier{Roots: roots, Issuers: attestation.FetchIssuers(&http.Client{Timeout: 10 * time.Second}),
			Now: time.Now, MaxAge: attestation.MaxAge},
		Instances: workers, Subscription: self.Subscription,
	}, workers, nil
}

func run(kubeconfig, subnets, identity, lease string, joins *csrapprover.Joins, workers *csrapprover.WorkerInstances) error {
	var prefixes []netip.Prefix
	for _, s := range strings.Split(subnets, ",") {
		prefix, err := netip.ParsePrefix(s)
		if err != nil {
			return fmt.Errorf("--node-subnets: %w", err)
		}
		prefixes = append(prefixes, prefix.Masked())
	}
	var err error
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
	return csrapprover.Run(ctx, csrapprover.Config{Client: client, NodeSubnets: prefixes, Joins: joins,
		Placement: workers, Addresses: workers, Identity: identity, Lease: lease})
}
