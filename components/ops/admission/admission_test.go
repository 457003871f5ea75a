package admission

import (
	"crypto/tls"
	"crypto/x509"
	"io"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/clusterforge/clusterforge/components/pki"
	"github.com/clusterforge/clusterforge/components/spec"
	"github.com/clusterforge/clusterforge/components/wellknown"
)

// The webhooks answer the apiservers' webhook client certificate only, over the TLS settings the
// controller serves with (callers verified against the webhook client CA): no certificate and
// another name from that CA get 403; a certificate of the cluster CA fails the handshake.
func TestFromAnswersTheAPIServerOnly(t *testing.T) {
	c := &spec.Cluster{Name: "cf-test", Pools: []spec.Pool{{Name: "cpu", VMSize: "Standard_D4ds_v5", Nodes: 3}}}
	c.Default()
	b, err := pki.Issue(pki.Authorities(c), pki.Profiles(c))
	if err != nil {
		t.Fatal(err)
	}
	pair := func(name string) tls.Certificate {
		p, err := tls.X509KeyPair([]byte(b.Pair(name).CertPEM), []byte(b.Pair(name).KeyPEM))
		if err != nil {
			t.Fatal(err)
		}
		return p
	}
	other := pki.Profile{Name: "other", Issuer: pki.WebhookClientCA, CommonName: "someone-else",
		Usages: []pki.Usage{pki.DigitalSignature, pki.KeyEncipherment, pki.ClientAuth}}
	if b, err = pki.Renew(b, pki.Authorities(c), append(pki.Profiles(c), other)); err != nil {
		t.Fatal(err)
	}
	pool := func(name string) *x509.CertPool {
		p := x509.NewCertPool()
		p.AppendCertsFromPEM([]byte(b.Pair(name).CertPEM))
		return p
	}
	servingCA, clientCA := pool(pki.WebhookServingCA), pool(pki.WebhookClientCA)
	srv := httptest.NewUnstartedServer(From(pki.APIServerWebhookUser, http.HandlerFunc(func(rw http.ResponseWriter, _ *http.Request) {
		_, _ = io.WriteString(rw, "reviewed")
	})))
	srv.TLS = &tls.Config{Certificates: []tls.Certificate{pair(pki.OpsWebhook)}, ClientAuth: tls.VerifyClientCertIfGiven, ClientCAs: clientCA}
	srv.StartTLS()
	defer srv.Close()

	for _, tc := range []struct {
		what      string
		presented []tls.Certificate
		status    int // 0: the handshake fails
	}{
		{"the apiservers' webhook client", []tls.Certificate{pair(pki.APIServerWebhookClient)}, http.StatusOK},
		{"no certificate (a pod)", nil, http.StatusForbidden},
		{"another name from the webhook client CA", []tls.Certificate{pair(other.Name)}, http.StatusForbidden},
		{"the admin, from the cluster CA", []tls.Certificate{pair(pki.Admin)}, 0},
	} {
		presented := tc.presented
		client := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{
			RootCAs: servingCA, ServerName: wellknown.OpsServiceHost,
			// Sent whatever authorities the server names, as a hostile client would.
			GetClientCertificate: func(*tls.CertificateRequestInfo) (*tls.Certificate, error) {
				if len(presented) == 0 {
					return &tls.Certificate{}, nil
				}
				return &presented[0], nil
			}}}}
		resp, err := client.Post(srv.URL+wellknown.OpsBrakePath, "application/json", nil)
		status := 0
		if err == nil {
			status = resp.StatusCode
			resp.Body.Close()
		}
		if status != tc.status {
			t.Errorf("%s: HTTP %d (%v), want %d", tc.what, status, err, tc.status)
		}
	}
}
