package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"os/exec"
	"strings"
	"time"

	"github.com/google/nftables"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/clusterforge/clusterforge/components/ops/maintenance"
	"github.com/clusterforge/clusterforge/components/ops/preflight"
	"github.com/clusterforge/clusterforge/components/ops/traffic"
	"github.com/clusterforge/clusterforge/components/wellknown"
)

// commandTests are --preflight-command values, "name=argv...": a test whose program is absent
// (no DCGM on this image) is skipped with a log line, not failed.
type commandTests []preflight.Test

func (c *commandTests) String() string { return fmt.Sprint(len(*c)) }

func (c *commandTests) Set(v string) error {
	name, command, ok := strings.Cut(v, "=")
	argv := strings.Fields(command)
	if !ok || name == "" || len(argv) == 0 {
		return fmt.Errorf("%q: want name=program [args...]", v)
	}
	if _, err := exec.LookPath(argv[0]); err != nil {
		log.Printf("preflight test %s skipped: %v", name, err)
		return nil
	}
	*c = append(*c, preflight.Command(name, argv...))
	return nil
}

// agent counts its node's pods' traffic from the start, tests its own node once if it waits for
// preflight, then keeps its MaintenanceScheduled condition from the metadata service's scheduled
// events.
func agent(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("agent", flag.ContinueOnError)
	kubeconfig := fs.String("kubeconfig", "", "kubeconfig (default: in-cluster)")
	node := fs.String("node", "", "this node's name (the DaemonSet passes spec.nodeName)")
	imds := fs.String("imds", "http://"+wellknown.IMDSAddress, "the instance metadata service")
	poll := fs.Duration("poll", 10*time.Second, "scheduled events poll period")
	computeMiB := fs.Int("preflight-compute-mib", 256, "preflight: MiB hashed on every processor")
	perTest := fs.Duration("preflight-timeout", 10*time.Minute, "preflight: limit of each test")
	var commands commandTests
	fs.Var(&commands, "preflight-command", "preflight: an extra test, name=program [args...] (repeatable; skipped where the program is absent)")
	trafficListen := fs.String("traffic-listen", "", "host:port of the pods' traffic counters' /metrics (HTTP; empty: no counting)")
	cniResults := fs.String("cni-results", wellknown.CNIResultsDir, "traffic: the CNI result cache the node's pods are read from")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *node == "" {
		return fmt.Errorf("--node: required")
	}
	if *trafficListen != "" {
		if err := countTraffic(ctx, *trafficListen, *cniResults); err != nil {
			return err
		}
	}
	cs, err := client(*kubeconfig, nil)
	if err != nil {
		return err
	}
	self, err := cs.CoreV1().Nodes().Get(ctx, *node, metav1.GetOptions{})
	if err != nil {
		return err
	}
	cpus := int(self.Status.Capacity.Cpu().Value())
	tests := append([]preflight.Test{preflight.Compute(cpus, *computeMiB<<20, *perTest)}, commands...)
	if err := (&preflight.Agent{Client: cs, NodeName: *node, Tests: tests, PerTest: *perTest}).Pass(ctx); err != nil {
		log.Printf("preflight: %v", err) // the condition says so; remediation acts on it
	}
	httpClient := &http.Client{Timeout: 5 * time.Second}
	vm, err := vmName(ctx, httpClient, *imds)
	if err != nil {
		return err
	}
	w := &maintenance.Watcher{Client: cs, NodeName: *node, VMName: vm, Endpoint: *imds, HTTP: httpClient, Every: *poll, Logf: log.Printf}
	return w.Run(ctx)
}

// countTraffic keeps this node's pods' counters (L32) and serves them until ctx ends.
func countTraffic(ctx context.Context, listen, cniResults string) error {
	conn, err := nftables.New()
	if err != nil {
		return fmt.Errorf("traffic: nftables: %w", err)
	}
	a := &traffic.Accountant{Counters: &traffic.Counters{Conn: conn}, CNIResults: cniResults}
	if err := a.Refresh(); err != nil {
		return fmt.Errorf("traffic: %w", err)
	}
	go a.Run(ctx, 5*time.Second, log.Printf)
	mux := http.NewServeMux()
	mux.Handle("/metrics", a)
	srv := &http.Server{Addr: listen, Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	go func() {
		<-ctx.Done()
		_ = srv.Close()
	}()
	l, err := net.Listen("tcp", listen)
	if err != nil {
		return fmt.Errorf("traffic: %w", err)
	}
	go func() { log.Printf("traffic: %v", srv.Serve(l)) }()
	return nil
}

// vmName is the VM's name as scheduled events spell it: the metadata service's compute/name.
func vmName(ctx context.Context, c *http.Client, imds string) (string, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, imds+"/metadata/instance/compute/name?api-version=2021-02-01&format=text", nil)
	if err != nil {
		return "", err
	}
	req.Header.Set("Metadata", "true")
	resp, err := c.Do(req)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, 1024))
	if err != nil || resp.StatusCode != http.StatusOK {
		return "", fmt.Errorf("instance metadata compute/name: %s %s %v", resp.Status, body, err)
	}
	return strings.TrimSpace(string(body)), nil
}
