package rehearsal_test

import (
	"crypto/tls"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"

	"github.com/clusterforge/clusterforge/components/pki"
)

// drillWebhook is an admission webhook served from this test process on 127.0.0.1 over TLS, as
// the apiservers call clusterforge-ops's: its certificate is issued by a CA of the drill's own.
type drillWebhook struct {
	Client  admissionregistrationv1.WebhookClientConfig
	Reviews atomic.Int32
}

// serveWebhook serves handler until the test ends and counts the reviews it answers.
func serveWebhook(t *testing.T, handler http.Handler) *drillWebhook {
	t.Helper()
	bundle, err := pki.Issue([]pki.Authority{{Name: "webhook-ca", CommonName: "drill webhook CA", Usages: []pki.Usage{pki.CertSigning, pki.DigitalSignature}}},
		[]pki.Profile{{Name: "webhook", Issuer: "webhook-ca", CommonName: "webhook", IPAddresses: []string{"127.0.0.1"},
			Usages: []pki.Usage{pki.DigitalSignature, pki.KeyEncipherment, pki.ServerAuth}}})
	if err != nil {
		t.Fatal(err)
	}
	serving, err := tls.X509KeyPair([]byte(bundle.Pair("webhook").CertPEM), []byte(bundle.Pair("webhook").KeyPEM))
	if err != nil {
		t.Fatal(err)
	}
	w := &drillWebhook{}
	server := httptest.NewUnstartedServer(http.HandlerFunc(func(rw http.ResponseWriter, r *http.Request) {
		w.Reviews.Add(1)
		handler.ServeHTTP(rw, r)
	}))
	server.TLS = &tls.Config{Certificates: []tls.Certificate{serving}, MinVersion: tls.VersionTLS12}
	server.StartTLS()
	t.Cleanup(server.Close)
	url := server.URL + "/"
	w.Client = admissionregistrationv1.WebhookClientConfig{URL: &url, CABundle: []byte(bundle.Pair("webhook-ca").CertPEM)}
	return w
}
