package ops

import (
	"context"
	"crypto/tls"
	"fmt"
	"net/http"
	"net/http/httptest"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/clusterforge/clusterforge/components/nodestatus"
	"github.com/clusterforge/clusterforge/components/pki"
	"github.com/clusterforge/clusterforge/components/spec"
	"github.com/clusterforge/clusterforge/test/drills"
	"github.com/clusterforge/clusterforge/test/e2e/framework"
)

// drillNodes registers n KWOK nodes of 4 CPUs (the CPU pool's size) of the drill's pool, in a gang
// domain of its own, carrying taints, and deletes them when the test ends.
func drillNodes(t *testing.T, cs *kubernetes.Clientset, pool string, n int, taints ...corev1.Taint) []string {
	t.Helper()
	cpuPool := slices.IndexFunc(framework.Running.Cluster.Pools, func(p spec.Pool) bool { return !p.IsGPU() && len(p.Taints) == 0 })
	names := make([]string, n)
	for i := range names {
		names[i] = fmt.Sprintf("%s-%d", pool, i)
	}
	framework.DrillNodes(t, cs, cpuPool, names, func(node *corev1.Node) {
		framework.SetPlacement(node, pool, pool)
		node.Spec.Taints = taints
	})
	return names
}

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

// awaitRegistered repeats probe, a request the webhook reviews, until four in a row were
// reviewed: each apiserver learns of a new webhook configuration from its own watch.
func (w *drillWebhook) awaitRegistered(t *testing.T, probe func(i int)) {
	t.Helper()
	if err := drills.WaitUntil(30*time.Second, func() error {
		before := w.Reviews.Load()
		for i := range 4 {
			probe(i)
		}
		if got := w.Reviews.Load() - before; got < 4 {
			return fmt.Errorf("%d of 4 probes reviewed", got)
		}
		return nil
	}); err != nil {
		t.Fatalf("the webhook is not called: %v", err)
	}
}

// readyNodes fails until every node is Ready.
func readyNodes(ctx context.Context, cs *kubernetes.Clientset, names []string) error {
	for _, name := range names {
		n, err := cs.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		if err := nodestatus.Ready(n, time.Now()); err != nil {
			return fmt.Errorf("node %s: %w", name, err)
		}
	}
	return nil
}
