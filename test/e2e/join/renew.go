package join

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/sha256"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/hex"
	"encoding/pem"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	certv1 "k8s.io/api/certificates/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/clusterforge/clusterforge/components/csrapprover"
	"github.com/clusterforge/clusterforge/components/machine"
	"github.com/clusterforge/clusterforge/components/pki"
	"github.com/clusterforge/clusterforge/components/spec"
	"github.com/clusterforge/clusterforge/components/wellknown"
	"github.com/clusterforge/clusterforge/test/drills"
	"github.com/clusterforge/clusterforge/test/e2e/framework"
	"github.com/clusterforge/clusterforge/test/machines"
)

// Every worker's client certificate lives pki.NodeClientLifetime, as the controller-manager
// signed it; a worker renews it by proving its instance again (clusterforge-node-join, approved by
// the CSR approver, which the running kubelet then takes up), and the node's own certificate gets no
// renewal without an attested document, nor another node's.
func NodeRenewsAsItsInstance(t *testing.T) {
	framework.NeedBoot(t)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	workers := framework.WorkerNames()
	cs := drills.Clientset(t, framework.Booted)
	for _, w := range workers {
		if cert := clientCertificate(t, ctx, w); cert.NotAfter.Sub(cert.NotBefore) > pki.NodeClientLifetime+10*time.Minute {
			t.Errorf("%s's client certificate lives %s (%s to %s), want %s (and the signer's backdating) at most", w,
				cert.NotAfter.Sub(cert.NotBefore), cert.NotBefore, cert.NotAfter, pki.NodeClientLifetime)
		}
	}

	// Not the first worker: the join drill spends its instance's share of requests.
	worker := workers[len(workers)-1]
	before := clientCertificate(t, ctx, worker)
	renew := ". " + machine.NodeEnvFile + ` && ` + machine.BinDir + `/clusterforge-node-join --renew-now --node-name="$NODE_NAME" --provider-id="$PROVIDER_ID"` +
		" --metadata-endpoint=http://" + wellknown.IMDSAddress + " --kubeconfig=" + machine.KubeletKubeconfig + " --client-cert=" + machine.KubeletClientCert
	// A holder of one pool's join token floods the apiservers and the approver with requests from
	// several clients while another pool's worker asks to join and a node renews: each is judged
	// among them, within a minute.
	first := workers[0]
	flooding := otherPool(t, first)
	token, loaded, stop, flooded := joinToken(t, flooding), make(chan struct{}), make(chan struct{}), make(chan int)
	go func() { flooded <- flood(ctx, token, loaded, stop) }()
	select {
	case <-loaded:
	case <-time.After(time.Minute):
		t.Errorf("the join token could not send %d requests in a minute", floodLeast)
	}
	m, err := framework.Booted.Machine(first)
	if err != nil {
		t.Fatal(err)
	}
	key, doc := attestedOn(t, ctx, first)
	start := time.Now()
	join := askToJoin(t, ctx, joinToken(t, poolOf(t, first)), first, doc, machines.ResourceID(framework.Booted.Cluster, m.Role, m.Name), key)
	verdict, _, err := drills.CSRVerdict(ctx, cs, join, 2*time.Minute)
	judged := time.Since(start)
	if err != nil || verdict.Reason != csrapprover.Reason {
		t.Errorf("%s's join request during the flood: %+v, %v; want a verdict of the CSR approver", first, verdict, err)
	}
	t.Logf("%s (pool %s) asked to join and was judged in %s while pool %s's token flooded: %s", first, poolOf(t, first), judged.Round(time.Millisecond), flooding, verdict.Message)
	if judged > time.Minute {
		t.Errorf("%s's join request was judged in %s during the flood, want a minute at most", first, judged)
	}
	start = time.Now()
	out, err := framework.Booted.Exec(ctx, worker, "sh", "-c", renew+" 2>&1")
	took := time.Since(start)
	close(stop)
	sent := <-flooded
	if err != nil {
		t.Fatalf("renewing %s's client certificate: %v\n%s", worker, err, out)
	}
	t.Logf("%s renewed in %s; the join token sent %d requests", worker, took.Round(time.Millisecond), sent)
	if took > time.Minute {
		t.Errorf("%s took %s to renew during the flood, want a minute at most", worker, took)
	}
	after := clientCertificate(t, ctx, worker)
	if after.SerialNumber.Cmp(before.SerialNumber) == 0 {
		t.Fatalf("%s's client certificate is still serial %s after the renewal", worker, before.SerialNumber)
	}
	csrs, err := cs.CertificatesV1().CertificateSigningRequests().List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	renewed := false
	for _, c := range csrs.Items {
		for _, cond := range c.Status.Conditions {
			renewed = renewed || (c.Spec.Username == pki.NodeUserPrefix+worker && cond.Type == certv1.CertificateApproved &&
				cond.Reason == csrapprover.Reason && strings.Contains(cond.Message, "renewing"))
		}
	}
	if !renewed {
		t.Errorf("no renewal of %s approved by the CSR approver", worker)
	}
	// The running kubelet takes the renewed certificate up without a restart (its client reads
	// the files again within five minutes): the apiservers' audit logs show its requests made
	// with it (the credential id of a certificate is its SHA-256).
	fingerprint := sha256.Sum256(after.Raw)
	used := "grep -F " + machine.ShellQuote("X509SHA256="+hex.EncodeToString(fingerprint[:])) + " " + machine.AuditLogPath +
		` | grep -c '"userAgent":"kubelet/' || true`
	if err := drills.WaitUntil(7*time.Minute, func() error {
		for _, in := range framework.Booted.Of(spec.RoleAPIServer) {
			n, err := framework.Booted.Exec(ctx, in.Name, "sh", "-c", used)
			if err != nil {
				return err
			}
			if strings.TrimSpace(n) != "0" {
				t.Logf("%s's kubelet called %s with its renewed certificate (%s requests so far)", worker, in.Name, strings.TrimSpace(n))
				return nil
			}
		}
		return fmt.Errorf("no request of %s's kubelet with its renewed certificate in the apiservers' audit logs yet", worker)
	}); err != nil {
		t.Error(err)
	}

	// The node's own certificate, as root on the worker reads it: no renewal without a document
	// (the approver refuses it), none for another node (the apiserver refuses it first; the
	// approver would too).
	node := framework.AsNode(t, ctx, worker)
	ask := func(subject string) (*certv1.CertificateSigningRequest, error) {
		key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
		if err != nil {
			t.Fatal(err)
		}
		der, err := x509.CreateCertificateRequest(rand.Reader, &x509.CertificateRequest{Subject: pkix.Name{CommonName: pki.NodeUserPrefix + subject, Organization: []string{pki.NodesGroup}}}, key)
		if err != nil {
			t.Fatal(err)
		}
		return node.CertificatesV1().CertificateSigningRequests().Create(ctx, &certv1.CertificateSigningRequest{
			ObjectMeta: metav1.ObjectMeta{GenerateName: "drill-renew-"},
			Spec: certv1.CertificateSigningRequestSpec{Request: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE REQUEST", Bytes: der}),
				SignerName: certv1.KubeAPIServerClientKubeletSignerName, Usages: []certv1.KeyUsage{certv1.UsageDigitalSignature, certv1.UsageClientAuth}},
		}, metav1.CreateOptions{})
	}
	csr, err := ask(worker)
	if err != nil {
		t.Fatalf("a renewal without an attested document: %v", err)
	}
	c, gone, err := drills.CSRVerdict(ctx, cs, csr, 2*time.Minute)
	switch {
	case err != nil:
		t.Errorf("a renewal without an attested document: %v", err)
	case c.Type != certv1.CertificateDenied || c.Reason != csrapprover.Reason || !strings.Contains(c.Message, "no attested document") || !gone:
		t.Errorf("a renewal without an attested document: %s by %s (%s), removed %v; want denied by the CSR approver and removed", c.Type, c.Reason, c.Message, gone)
	default:
		t.Logf("a renewal without an attested document: denied: %s", c.Message)
	}
	if _, err := ask(workers[0]); !apierrors.IsForbidden(err) {
		t.Errorf("%s asking for %s's certificate: %v, want Forbidden by the apiserver", worker, workers[0], err)
	} else {
		t.Logf("%s asking for %s's certificate: %v", worker, workers[0], err)
	}
}

// clientCertificate is the kubelet's current client certificate on worker.
func clientCertificate(t *testing.T, ctx context.Context, worker string) *x509.Certificate {
	t.Helper()
	pair, err := framework.Booted.Exec(ctx, worker, "cat", machine.KubeletClientCert)
	if err != nil {
		t.Fatal(err)
	}
	for rest := []byte(pair); ; {
		var block *pem.Block
		if block, rest = pem.Decode(rest); block == nil {
			t.Fatalf("%s: no certificate in %s", worker, machine.KubeletClientCert)
		}
		if block.Type == "CERTIFICATE" {
			cert, err := x509.ParseCertificate(block.Bytes)
			if err != nil {
				t.Fatal(err)
			}
			return cert
		}
	}
}

// floodLeast is how many requests a flood sends before the genuine ones start, floodMost how many
// at most, floodClients from how many clients at once.
const (
	floodLeast   = 20
	floodMost    = 500
	floodClients = 8
)

// flood creates join requests without an attested document as the join token until stop (at most
// floodMost, each refused by the approver and removed), closing loaded once it has created
// floodLeast, and says how many it created.
func flood(ctx context.Context, token *kubernetes.Clientset, loaded, stop chan struct{}) int {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return 0
	}
	der, err := x509.CreateCertificateRequest(rand.Reader, &x509.CertificateRequest{Subject: pkix.Name{CommonName: pki.NodeUserPrefix + "drill-flood", Organization: []string{pki.NodesGroup}}}, key)
	if err != nil {
		return 0
	}
	csr := &certv1.CertificateSigningRequest{ObjectMeta: metav1.ObjectMeta{GenerateName: "drill-flood-"},
		Spec: certv1.CertificateSigningRequestSpec{Request: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE REQUEST", Bytes: der}),
			SignerName: certv1.KubeAPIServerClientKubeletSignerName, Usages: []certv1.KeyUsage{certv1.UsageDigitalSignature, certv1.UsageClientAuth}}}
	var sent atomic.Int64
	var clients sync.WaitGroup
	for range floodClients {
		clients.Add(1)
		go func() {
			defer clients.Done()
			for sent.Load() < floodMost {
				select {
				case <-stop:
					return
				default:
				}
				if _, err := token.CertificatesV1().CertificateSigningRequests().Create(ctx, csr, metav1.CreateOptions{}); err == nil {
					if sent.Add(1) == floodLeast {
						close(loaded)
					}
				}
			}
		}()
	}
	clients.Wait()
	<-stop
	return int(sent.Load())
}
