package main

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"flag"
	"fmt"
	"log"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/rest"

	"github.com/clusterforge/clusterforge/components/azurecloud"
	"github.com/clusterforge/clusterforge/components/leader"
	"github.com/clusterforge/clusterforge/components/ops/admission"
	"github.com/clusterforge/clusterforge/components/ops/brake"
	"github.com/clusterforge/clusterforge/components/ops/gangs"
	"github.com/clusterforge/clusterforge/components/ops/remediation"
	"github.com/clusterforge/clusterforge/components/ops/scaleset"
	"github.com/clusterforge/clusterforge/components/ops/teams"
	"github.com/clusterforge/clusterforge/components/pki"
	"github.com/clusterforge/clusterforge/components/spec"
	"github.com/clusterforge/clusterforge/components/wellknown"
)

// controller serves the webhooks on every replica and, while it holds the lease, runs remediation,
// the team taints and the gang-room gate; from one shared cache of nodes, namespaces and its own
// ConfigMaps, and one of the gated gang pods.
func controller(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("controller", flag.ContinueOnError)
	kubeconfig := fs.String("kubeconfig", "", "kubeconfig (default: in-cluster)")
	namespace := fs.String("namespace", metav1.NamespaceSystem, "namespace of the lease, the brake's ledger and the teams' ConfigMap")
	listen := fs.String("listen", ":"+strconv.Itoa(wellknown.OpsWebhookPort), "host:port of the webhooks (HTTPS), /healthz and /metrics")
	tlsDir := fs.String("tls-dir", "", "directory of the serving pair, tls.crt and tls.key (re-read when they change), and ca.crt, the authority of the apiservers' webhook client certificate (read at start)")
	identity := fs.String("identity", os.Getenv("POD_NAME"), "this replica's name in the leader election")
	cloudConfig := fs.String("cloud-config", "", "cluster-autoscaler's Azure cloud config: remediation hands machines back through it; empty: remediation only marks and drains")
	scaleSets := fs.String("worker-scale-sets", "", "comma-separated worker scale sets remediation may delete instances of")
	apiserverScaleSet := fs.String("apiserver-scale-set", "", "the apiserver scale set whose automatic repairs' state is exported (needs --cloud-config)")
	maxUnhealthy := fs.Float64("remediation-max-unhealthy", remediation.DefaultPolicy().MaxUnhealthy, "remediation: the share of a pool's or the cluster's nodes (while a zone is out, of each pool's nodes in every other zone) unhealthy at once above which nothing is marked")
	gangDomains := fs.String("gang-domains", "", "the cluster's gang domains at full size, as JSON (machine.GangDomainShapes): gangs' pods wait behind the gang-room gate until one could hold the whole gang; empty: the gate's controller does not run")
	teamQuota := fs.String("team-quota", "", "every team namespace's ResourceQuota: name=quantity pairs, comma-separated; empty: none kept")
	teamObjects := spec.Teams{}
	fs.Int64Var(&teamObjects.MaxObjectBytes, "team-object-bytes", spec.DefaultTeamMaxObjectBytes, "the largest object, as JSON, a team may write into its namespace")
	fs.Int64Var(&teamObjects.MaxDataObjectBytes, "team-data-object-bytes", spec.DefaultTeamMaxDataObjectBytes, "the largest ConfigMap or Secret, as JSON, a team may write into its namespace")
	if err := fs.Parse(args); err != nil {
		return err
	}
	policy := remediation.DefaultPolicy()
	policy.MaxUnhealthy = *maxUnhealthy
	if err := policy.Validate(); err != nil {
		return fmt.Errorf("--remediation-max-unhealthy: %w", err)
	}
	var domains []gangs.Domain
	if *gangDomains != "" {
		var err error
		if domains, err = gangs.ParseDomains(*gangDomains); err != nil {
			return fmt.Errorf("--gang-domains: %w", err)
		}
	}
	cs, err := client(*kubeconfig, nil)
	if err != nil {
		return err
	}
	gateClient, err := client(*kubeconfig, func(cfg *rest.Config) { cfg.QPS, cfg.Burst = gangs.ClientQPS, gangs.ClientBurst })
	if err != nil {
		return err
	}
	hard, err := teams.ParseQuota(*teamQuota)
	if err != nil {
		return err
	}
	signedIn := &atomic.Bool{}
	repairs := &atomic.Int32{}
	repairs.Store(scaleset.RepairsUnknown)
	machines, err := machinesFrom(ctx, *cloudConfig, strings.Split(*scaleSets, ","), *apiserverScaleSet, signedIn, repairs)
	if err != nil {
		return err
	}
	cluster := informers.NewSharedInformerFactory(cs, 0)
	nodes, namespaces := cluster.Core().V1().Nodes(), cluster.Core().V1().Namespaces()
	nodeInformer := nodes.Informer()
	namespaceInformer := namespaces.Informer() // registered before Start: the teams webhook reads namespaces from the cache
	own := informers.NewSharedInformerFactoryWithOptions(cs, 0, informers.WithNamespace(*namespace))
	configInformer := own.Core().V1().ConfigMaps().Informer()
	cluster.Start(ctx.Done())
	own.Start(ctx.Done())
	for _, synced := range cluster.WaitForCacheSync(ctx.Done()) {
		if !synced {
			return errors.New("the node and namespace caches did not sync")
		}
	}

	refusals := &refusalCounter{byPool: map[string]int{}}
	brakeHook := &brake.Webhook{Policy: brake.DefaultPolicy(), Now: time.Now,
		Ledger:  &brake.ConfigMapLedger{Client: cs, Namespace: *namespace, Name: wellknown.OpsBrakeLedger},
		Fleet:   brake.FleetOf(nodeInformer.GetStore()),
		Refused: func(r *brake.Refusal) { refusals.add(r); log.Printf("refused: %v", r) }}
	teamHook := &teams.Webhook{BorrowPriorityClass: wellknown.BorrowPriority, NamespaceTeam: func(name string) (string, error) {
		ns, err := namespaces.Lister().Get(name)
		if err != nil {
			// A namespace created this instant may not be cached yet.
			if ns, err = cs.CoreV1().Namespaces().Get(ctx, name, metav1.GetOptions{}); err != nil {
				return "", err
			}
		}
		return ns.Labels[teams.NamespaceLabel], nil
	}}
	mux := http.NewServeMux()
	mux.Handle(wellknown.OpsBrakePath, admission.From(pki.APIServerWebhookUser, brakeHook))
	mux.Handle(wellknown.OpsTeamsPath, admission.From(pki.APIServerWebhookUser, teamHook))
	mux.Handle(wellknown.OpsTeamObjectsPath, admission.From(pki.APIServerWebhookUser, teams.NewSizes(teamObjects.ObjectBytes, teams.MaxSizeReviews)))
	mux.HandleFunc("/healthz", func(w http.ResponseWriter, _ *http.Request) { fmt.Fprintln(w, "ok") })
	mux.HandleFunc("/metrics", func(w http.ResponseWriter, r *http.Request) {
		refusals.ServeHTTP(w, r)
		if *cloudConfig != "" { // without one, nothing signs in
			fmt.Fprintf(w, "# HELP %s 1 while this replica reads its worker scale sets through its workload identity.\n# TYPE %[1]s gauge\n%[1]s %d\n",
				wellknown.AzureSignedInMetric, boolGauge(signedIn.Load()))
		}
		if state := repairs.Load(); state != scaleset.RepairsUnknown {
			fmt.Fprintf(w, "# HELP %s 1 while the apiserver scale set's automatic repairs are suspended.\n# TYPE %[1]s gauge\n%[1]s %d\n",
				wellknown.APIServerRepairsSuspendedMetric, state)
		}
	})
	pair := &reloadingPair{dir: *tlsDir}
	// Callers are asked for a certificate of the webhook client CA; the webhooks take only the apiservers'
	// (/healthz and /metrics answer anyone).
	clients := x509.NewCertPool()
	caFile := filepath.Join(*tlsDir, corev1.ServiceAccountRootCAKey)
	ca, err := os.ReadFile(caFile)
	if err != nil {
		return fmt.Errorf("the authority the webhooks verify the apiservers with: %w", err)
	}
	if !clients.AppendCertsFromPEM(ca) {
		return fmt.Errorf("the authority the webhooks verify the apiservers with: no certificate in %s", caFile)
	}
	srv := &http.Server{Addr: *listen, Handler: mux, ReadHeaderTimeout: 10 * time.Second,
		TLSConfig: &tls.Config{MinVersion: tls.VersionTLS12, GetCertificate: pair.get, ClientAuth: tls.VerifyClientCertIfGiven, ClientCAs: clients}}
	serveErr := make(chan error, 1)
	go func() { serveErr <- srv.ListenAndServeTLS("", "") }()
	defer srv.Close()

	lead := func(ctx context.Context) {
		var wg sync.WaitGroup
		wg.Add(3)
		if *gangDomains != "" {
			wg.Add(1)
			go func() {
				defer wg.Done()
				c := &gangs.Controller{Client: gateClient, Domains: domains, Logf: log.Printf}
				if err := c.Run(ctx); err != nil && ctx.Err() == nil {
					log.Printf("gang-room gate: %v", err)
				}
			}()
		}
		go func() {
			defer wg.Done()
			n := &teams.Namespaces{Client: cs, Hard: hard, Every: 10 * time.Minute, Logf: log.Printf}
			if err := n.Run(ctx, namespaceInformer); err != nil && ctx.Err() == nil {
				log.Printf("team namespaces: %v", err)
			}
		}()
		go func() {
			defer wg.Done()
			c := &remediation.Controller{Client: cs, Policy: policy, Machines: machines, Logf: log.Printf}
			if err := c.Run(ctx, nodeInformer); err != nil && ctx.Err() == nil {
				log.Printf("remediation: %v", err)
			}
		}()
		go func() {
			defer wg.Done()
			c := &teams.Controller{Client: cs, Namespace: *namespace, Logf: log.Printf}
			if err := c.Run(ctx, nodeInformer, configInformer); err != nil && ctx.Err() == nil {
				log.Printf("teams: %v", err)
			}
		}()
		wg.Wait()
	}
	if *identity == "" {
		if *identity, err = os.Hostname(); err != nil {
			return err
		}
	}
	election := leader.Election{Client: cs, Namespace: *namespace, Lease: wellknown.OpsName, Identity: *identity, Logf: log.Printf}
	ctx, stop := context.WithCancel(ctx)
	led := make(chan error, 1)
	go func() { led <- leader.Run(ctx, election, lead) }()
	select {
	case err = <-led: // the signal came, or a configuration that cannot run
	case err = <-serveErr:
		stop()
		<-led // the last term has ended: remediation stopped acting
	}
	stop()
	return err
}

// machinesFrom is remediation's way to hand machines back: the worker scale sets through the
// controller's workload identity; without a cloud config, a Node is deleted and its VM left to
// the autoscaler, which removes what no longer registers.
// machinesFrom reaches the worker scale sets through cloudConfig, keeping signedIn and, given
// apiserverScaleSet, the apiserver scale set's repairs state current.
func machinesFrom(ctx context.Context, cloudConfig string, scaleSets []string, apiserverScaleSet string, signedIn *atomic.Bool, repairs *atomic.Int32) (remediation.Machines, error) {
	if cloudConfig == "" {
		return nodeOnly{}, nil
	}
	access, err := scaleset.ReadAccess(cloudConfig, os.Getenv(azurecloud.FileEnv), scaleSets)
	if err != nil {
		return nil, err
	}
	go scaleset.KeepSignedIn(ctx, access, signedIn)
	if apiserverScaleSet != "" {
		go scaleset.WatchRepairs(ctx, access, apiserverScaleSet, time.Minute, repairs)
	}
	return access.Machines()
}

func boolGauge(b bool) int {
	if b {
		return 1
	}
	return 0
}

// nodeOnly removes nothing but the Node (deleted by the controller after Remove).
type nodeOnly struct{}

func (nodeOnly) Remove(context.Context, *corev1.Node) error { return nil }

// reloadingPair serves the newest serving pair in dir: `pulumi up` renews the Secret and the
// kubelet updates the mounted files; the pair is re-read at most once a minute.
type reloadingPair struct {
	dir    string
	mu     sync.Mutex
	cert   *tls.Certificate
	loaded time.Time
}

func (p *reloadingPair) get(*tls.ClientHelloInfo) (*tls.Certificate, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cert == nil || time.Since(p.loaded) > time.Minute {
		cert, err := tls.LoadX509KeyPair(filepath.Join(p.dir, "tls.crt"), filepath.Join(p.dir, "tls.key"))
		if err != nil && p.cert == nil {
			return nil, err
		}
		if err == nil {
			p.cert = &cert
		}
		p.loaded = time.Now()
	}
	return p.cert, nil
}

// refusalCounter is wellknown.BrakeRefusalsMetric by scope (a pool, or "cluster"), in
// Prometheus' text format.
type refusalCounter struct {
	mu     sync.Mutex
	byPool map[string]int
}

func (r *refusalCounter) add(refusal *brake.Refusal) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.byPool[refusal.Scope]++
}

func (r *refusalCounter) ServeHTTP(w http.ResponseWriter, _ *http.Request) {
	r.mu.Lock()
	defer r.mu.Unlock()
	fmt.Fprintf(w, "# HELP %s Node removals the scale-down brake refused (L14).\n", wellknown.BrakeRefusalsMetric)
	fmt.Fprintf(w, "# TYPE %s counter\n", wellknown.BrakeRefusalsMetric)
	for scope, n := range r.byPool {
		fmt.Fprintf(w, "%s{scope=%q} %d\n", wellknown.BrakeRefusalsMetric, scope, n)
	}
}
