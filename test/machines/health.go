package machines

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"slices"
	"strings"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
	"google.golang.org/grpc"

	"github.com/clusterforge/clusterforge/components/pki"
	"github.com/clusterforge/clusterforge/components/spec"
	"github.com/clusterforge/clusterforge/components/wellknown"
)

// TLSConfig trusts a CA of the rehearsal and presents a client certificate, both from the bundle.
func (p *Layout) TLSConfig(client string, authorities ...string) (*tls.Config, error) {
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM([]byte(p.Bundle.Trust(authorities...))) {
		return nil, fmt.Errorf("rehearsal: bad %v certificates", authorities)
	}
	cert, err := tls.X509KeyPair([]byte(p.Bundle.Pair(client).CertPEM), []byte(p.Bundle.Pair(client).KeyPEM))
	if err != nil {
		return nil, err
	}
	return &tls.Config{RootCAs: pool, Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12}, nil
}

// EtcdClientURL is where an etcd member serves its clients.
func EtcdClientURL(in Instance) string {
	return fmt.Sprintf("https://%s:%d", in.IP, wellknown.EtcdClientPort)
}

// EtcdClient connects to the given members of one etcd cluster (all of them when none are
// named) as the apiserver does, with its client certificate.
func (p *Layout) EtcdClient(role string, members ...string) (*clientv3.Client, error) {
	tc, err := p.TLSConfig(pki.APIServerEtcdClient, pki.EtcdCA(role))
	if err != nil {
		return nil, err
	}
	var endpoints []string
	for _, in := range p.Of(role) {
		if len(members) == 0 || slices.Contains(members, in.Name) {
			endpoints = append(endpoints, EtcdClientURL(in))
		}
	}
	cfg := clientv3.Config{Endpoints: endpoints, TLS: tc, DialTimeout: 2 * time.Second, Logger: zap.NewNop()}
	if p.Dial != nil {
		cfg.DialOptions = []grpc.DialOption{grpc.WithContextDialer(func(ctx context.Context, addr string) (net.Conn, error) {
			return p.Dial(ctx, "tcp", addr)
		})}
	}
	return clientv3.New(cfg)
}

// HTTPClient talks to apiservers (directly or through the load balancer) as the admin.
func (p *Layout) HTTPClient() (*http.Client, error) {
	tc, err := p.TLSConfig(pki.Admin, pki.ClusterCA)
	if err != nil {
		return nil, err
	}
	// An apiserver's certificate names the load balancer's address, the name clients use, not the
	// machine's own: a direct request checks it against that name.
	tc.ServerName = p.Cluster.Network.APIServerIP
	return &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{TLSClientConfig: tc, DialContext: p.Dial}}, nil
}

// Poll calls check until it succeeds or timeout passes, returning its last error.
func Poll(ctx context.Context, timeout time.Duration, what string, check func(context.Context) error) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	var last error
	// The wait doubles up to a second: a check may start a process on a machine, and many
	// waits polling at once must not take the CPU from what they wait for.
	for wait := 250 * time.Millisecond; ; wait = min(2*wait, time.Second) {
		if last = check(ctx); last == nil {
			return nil
		}
		var permanent Permanent
		if errors.As(last, &permanent) {
			return fmt.Errorf("%s: %w", what, permanent.Err)
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%s: not ready after %s: %w", what, timeout, last)
		case <-time.After(wait):
		}
	}
}

// WaitEtcdHealthy waits until every member of an etcd cluster answers and a leader is elected.
func (p *Layout) WaitEtcdHealthy(ctx context.Context, role string) error {
	cli, err := p.EtcdClient(role)
	if err != nil {
		return err
	}
	defer cli.Close()
	return Poll(ctx, time.Minute, role, func(ctx context.Context) error {
		for _, ep := range cli.Endpoints() {
			sctx, cancel := context.WithTimeout(ctx, 2*time.Second)
			st, err := cli.Status(sctx, ep)
			cancel()
			if err != nil {
				return fmt.Errorf("%s: %w", ep, err)
			}
			if st.Leader == 0 {
				return fmt.Errorf("%s: no leader", ep)
			}
		}
		return nil
	})
}

// Get fetches a path from an apiserver URL as the admin and returns the status and body.
func (p *Layout) Get(ctx context.Context, url string) (int, string, error) {
	client, err := p.HTTPClient()
	if err != nil {
		return 0, "", err
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return 0, "", err
	}
	resp, err := client.Do(req)
	if err != nil {
		return 0, "", err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	return resp.StatusCode, string(body), err
}

func (p *Layout) expectOK(ctx context.Context, url string) error {
	code, body, err := p.Get(ctx, url)
	if err != nil {
		return err
	}
	if code != http.StatusOK {
		return fmt.Errorf("%s: HTTP %d: %s", url, code, strings.TrimSpace(body))
	}
	return nil
}

// WaitAPIHealthyWith waits for every apiserver, the load balancer, and componentOK for the
// controller-manager's and scheduler's health ports of every apiserver machine.
func (p *Layout) WaitAPIHealthyWith(ctx context.Context, componentOK func(context.Context, Instance, int) error) error {
	var errs []error
	for _, in := range p.Of(spec.RoleAPIServer) {
		url := fmt.Sprintf("https://%s:%d/readyz", in.IP, wellknown.APIServerPort)
		errs = append(errs, Poll(ctx, 2*time.Minute, in.Name+" kube-apiserver", func(ctx context.Context) error { return p.expectOK(ctx, url) }))
		for _, port := range []int{wellknown.ControllerManagerPort, wellknown.SchedulerPort} {
			errs = append(errs, Poll(ctx, time.Minute, fmt.Sprintf("%s port %d", in.Name, port), func(ctx context.Context) error { return componentOK(ctx, in, port) }))
		}
	}
	lb := p.Cluster.APIServerURL() + "/readyz"
	errs = append(errs, Poll(ctx, time.Minute, "load balancer", func(ctx context.Context) error { return p.expectOK(ctx, lb) }))
	return errors.Join(errs...)
}

// InsecureOK gets url without checking the server's certificate and wants 200: for components whose
// serving certificates are self-signed.
func (p *Layout) InsecureOK(ctx context.Context, url string) error {
	client := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}, DialContext: p.Dial}}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return err
	}
	resp, err := client.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("%s: HTTP %d", url, resp.StatusCode)
	}
	return nil
}

// Permanent wraps an error that ends a Poll at once.
type Permanent struct{ Err error }

func (p Permanent) Error() string { return p.Err.Error() }
