package certexpiry

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/clusterforge/clusterforge/test/toolchain"

	"github.com/clusterforge/clusterforge/components/pki"
	"github.com/clusterforge/clusterforge/components/spec"
)

func notAfter(t *testing.T, certPEM string) int64 {
	t.Helper()
	block, _ := pem.Decode([]byte(certPEM))
	c, err := x509.ParseCertificate(block.Bytes)
	if err != nil {
		t.Fatal(err)
	}
	return c.NotAfter.Unix()
}

// A machine's files and a TLS server's certificate are reported with their own expiry; an
// endpoint that presents nothing is counted as an error, and the output is what promtool accepts.
func TestCollectsFilesAndServers(t *testing.T) {
	c := &spec.Cluster{Name: "cf-test", Pools: []spec.Pool{{Name: "cpu", VMSize: "Standard_D4ds_v5", Nodes: 3}}}
	c.Default()
	b, err := pki.Issue(pki.Authorities(c), pki.Profiles(c))
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	apiserver := b.Pair(pki.APIServer)
	if err := os.WriteFile(filepath.Join(dir, "apiserver.crt"), []byte(apiserver.CertPEM), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "apiserver.key"), []byte(apiserver.KeyPEM), 0o600); err != nil {
		t.Fatal(err)
	}
	// The service-account key's public half sits in a .crt as the apiserver machines keep it: no
	// certificate, no error. A .crt that is not PEM at all is an error.
	if err := os.WriteFile(filepath.Join(dir, "service-account.crt"), []byte(b.Pair(pki.ServiceAccountKey).CertPEM), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "broken.crt"), []byte("not a certificate"), 0o600); err != nil {
		t.Fatal(err)
	}
	etcd := b.Pair(pki.EtcdServer(spec.RoleEtcdMain))
	pair, err := tls.X509KeyPair([]byte(etcd.CertPEM), []byte(etcd.KeyPEM))
	if err != nil {
		t.Fatal(err)
	}
	// A server that asks for a client certificate, as etcd does: the exporter has none.
	ln, err := tls.Listen("tcp", "127.0.0.1:0", &tls.Config{Certificates: []tls.Certificate{pair}, ClientAuth: tls.RequireAnyClientCert})
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		for {
			conn, err := ln.Accept()
			if err != nil {
				return
			}
			_ = conn.(*tls.Conn).Handshake()
			conn.Close()
		}
	}()
	closed, _ := net.Listen("tcp", "127.0.0.1:0")
	closed.Close()
	certs, errs := Source{Dir: dir, Endpoints: []string{ln.Addr().String(), closed.Addr().String()}}.Collect(context.Background())
	if len(certs) != 2 || len(errs) != 2 {
		t.Fatalf("certificates %v, errors %v: want the certificate file and the server; the closed port and the broken file as errors", certs, errs)
	}
	want := map[string]int64{filepath.Join(dir, "apiserver.crt"): notAfter(t, apiserver.CertPEM), "tls://" + ln.Addr().String(): notAfter(t, etcd.CertPEM)}
	for _, got := range certs {
		if want[got.Source] != got.NotAfter.Unix() {
			t.Errorf("%s expires %d, want %d", got.Source, got.NotAfter.Unix(), want[got.Source])
		}
	}
	var buf bytes.Buffer
	WriteMetrics(&buf, certs, errs)
	out := buf.String()
	cmd := exec.Command(toolchain.Binary(t, "bin/promtool"), "check", "metrics")
	cmd.Stdin = strings.NewReader(out)
	if msg, err := cmd.CombinedOutput(); err != nil {
		t.Errorf("promtool check metrics: %v\n%s\n%s", err, msg, out)
	} else if !strings.Contains(out, `source="tls://`) {
		t.Errorf("no endpoint series:\n%s", out)
	}
}
