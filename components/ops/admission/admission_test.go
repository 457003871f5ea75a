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
// controller serves with: no certificate, another identity of the cluster CA and a certificate of
// another CA (which the client does not even send: the server asks for the cluster CA's) get 403.
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
	clusterCA := x509.NewCertPool()
	clusterCA.AppendCertsFromPEM([]byte(b.Pair(pki.ClusterCA).CertPEM))
	srv := httptest.NewUnstartedServer(From(pki.APIServerWebhookUser, http.HandlerFunc(func(rw http.ResponseWriter, _ *http.Request) {
		_, _ = io.WriteString(rw, "reviewed")
	})))
	srv.TLS = &tls.Config{Certificates: []tls.Certificate{pair(pki.OpsWebhook)}, ClientAuth: tls.VerifyClientCertIfGiven, ClientCAs: clusterCA}
	srv.StartTLS()
	defer srv.Close()

	for _, tc := range []struct {
		what      string
		presented []tls.Certificate
		status    int
	}{
		{"the apiservers' webhook client", []tls.Certificate{pair(pki.APIServerWebhookClient)}, http.StatusOK},
		{"no certificate (a pod)", nil, http.StatusForbidden},
		{"the admin, another identity of the cluster CA", []tls.Certificate{pair(pki.Admin)}, http.StatusForbidden},
		{"the apiserver's etcd client, another CA", []tls.Certificate{pair(pki.APIServerEtcdClient)}, http.StatusForbidden},
	} {
		client := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{
			RootCAs: clusterCA, ServerName: wellknown.OpsServiceHost, Certificates: tc.presented}}}
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
