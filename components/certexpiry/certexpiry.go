// Package certexpiry reports when a machine's certificates expire, for Prometheus: the files
// under its PKI directory and what TLS servers present, so the CertificateExpiringSoon alert
// fires 30 days ahead and a roll renews them (L02's machines hold leaves that renew only in
// Pulumi state until a roll carries them). Nothing here imports Pulumi.
package certexpiry

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"fmt"
	"io"
	"io/fs"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/clusterforge/clusterforge/components/wellknown"
)

// Certificate is one certificate and where it was found.
type Certificate struct {
	// Source is a file path or "tls://host:port".
	Source   string
	Subject  string
	NotAfter time.Time
}

// Dialer opens a connection, as net.Dialer.DialContext does.
type Dialer func(ctx context.Context, network, addr string) (net.Conn, error)

// Source is what one machine reports.
type Source struct {
	// Dir holds certificate files (*.crt, PEM); each file's first certificate counts.
	Dir string
	// Endpoints are host:port of TLS servers whose presented certificate counts.
	Endpoints []string
	// Dial opens the connections; nil is the host's network.
	Dial Dialer
}

// Collect reads every certificate of the source; a file or endpoint it cannot read is an error
// in the list, not a missing series: an unreachable etcd member must not hide its expiry silently.
func (s Source) Collect(ctx context.Context) ([]Certificate, []error) {
	var out []Certificate
	var errs []error
	if s.Dir != "" {
		err := filepath.WalkDir(s.Dir, func(path string, d fs.DirEntry, err error) error {
			if err != nil || d.IsDir() || !strings.HasSuffix(path, ".crt") {
				return err
			}
			c, ok, err := readFile(path)
			if err != nil {
				errs = append(errs, err)
			} else if ok {
				out = append(out, c)
			}
			return nil
		})
		if err != nil {
			errs = append(errs, err)
		}
	}
	for _, ep := range s.Endpoints {
		ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		cert, err := PeerCertificate(ctx, s.Dial, ep)
		cancel()
		if err != nil {
			errs = append(errs, err)
			continue
		}
		out = append(out, Certificate{Source: "tls://" + ep, Subject: cert.Subject.CommonName, NotAfter: cert.NotAfter})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Source < out[j].Source })
	return out, errs
}

// readFile reads a file's first certificate; a PEM file of another kind (the service-account
// key's public half is kept as a .crt) is no certificate and not an error.
func readFile(path string) (Certificate, bool, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return Certificate{}, false, err
	}
	block, _ := pem.Decode(data)
	switch {
	case block == nil:
		return Certificate{}, false, fmt.Errorf("%s: not PEM", path)
	case block.Type != "CERTIFICATE":
		return Certificate{}, false, nil
	}
	cert, err := x509.ParseCertificate(block.Bytes)
	if err != nil {
		return Certificate{}, false, fmt.Errorf("%s: %w", path, err)
	}
	return Certificate{Source: path, Subject: cert.Subject.CommonName, NotAfter: cert.NotAfter}, true, nil
}

// PeerCertificate reads the certificate a TLS server at addr presents, without trusting or
// authenticating: what the machine serves, not what was rendered for it.
func PeerCertificate(ctx context.Context, dial Dialer, addr string) (*x509.Certificate, error) {
	if dial == nil {
		dial = (&net.Dialer{}).DialContext
	}
	raw, err := dial(ctx, "tcp", addr)
	if err != nil {
		return nil, err
	}
	defer raw.Close()
	var leaf *x509.Certificate
	conn := tls.Client(raw, &tls.Config{InsecureSkipVerify: true, VerifyConnection: func(cs tls.ConnectionState) error {
		leaf = cs.PeerCertificates[0] // only read: the handshake may fail after, for want of a client certificate
		return nil
	}})
	err = conn.HandshakeContext(ctx)
	if leaf == nil {
		return nil, fmt.Errorf("%s presented no certificate: %v", addr, err)
	}
	return leaf, nil
}

// WriteMetrics writes the certificates and the collection errors in Prometheus' text format.
func WriteMetrics(w io.Writer, certs []Certificate, errs []error) {
	fmt.Fprintf(w, "# HELP %s When the certificate expires.\n# TYPE %s gauge\n", wellknown.CertificateExpiryMetric, wellknown.CertificateExpiryMetric)
	for _, c := range certs {
		fmt.Fprintf(w, "%s{source=%s,subject=%s} %d\n", wellknown.CertificateExpiryMetric, strconv.Quote(c.Source), strconv.Quote(c.Subject), c.NotAfter.Unix())
	}
	fmt.Fprintf(w, "# HELP %[1]s Certificates that could not be read at this scrape.\n# TYPE %[1]s gauge\n", wellknown.CertificateReadErrorsMetric)
	fmt.Fprintf(w, "%s %d\n", wellknown.CertificateReadErrorsMetric, len(errs))
}

// Handler serves the source's metrics, collected at each scrape.
func Handler(s Source) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		certs, errs := s.Collect(r.Context())
		w.Header().Set("Content-Type", "text/plain; version=0.0.4")
		WriteMetrics(w, certs, errs)
	})
}
