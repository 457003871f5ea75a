package join

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"slices"
	"strings"
	"testing"
	"time"

	certv1 "k8s.io/api/certificates/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/clusterforge/clusterforge/components/addons"
	"github.com/clusterforge/clusterforge/components/attestation"
	"github.com/clusterforge/clusterforge/components/azurerbac"
	"github.com/clusterforge/clusterforge/components/csrapprover"
	"github.com/clusterforge/clusterforge/components/ops/scaleset"
	"github.com/clusterforge/clusterforge/components/pki"
	"github.com/clusterforge/clusterforge/components/spec"
	"github.com/clusterforge/clusterforge/components/wellknown"
	"github.com/clusterforge/clusterforge/test/drills"
	"github.com/clusterforge/clusterforge/test/e2e/framework"
	"github.com/clusterforge/clusterforge/test/machines"
	"github.com/clusterforge/clusterforge/test/standin/imds"
)

// Every worker joined through its instance's attested document, checked by the CSR approver
// against Resource Manager with the apiserver machines' identity; and the join token alone, as
// root on a worker holds it before it is removed, gets no other node's certificate: neither
// without a document, nor with the worker's own document under another node's name, nor with its
// own document and instance and another pool's token, nor a second identity for a worker whose
// node is alive; a document vouches for the first request that carries
// it, however it is re-encoded; one instance asking in a loop is refused before Resource Manager
// is asked, and the approver keeps up; and the token lists no requests.
func JoinNeedsTheInstancesAttestedDocument(t *testing.T) {
	framework.NeedBoot(t)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	cs := drills.Clientset(t, framework.Booted)
	workers := framework.WorkerNames()
	// The approver read each worker's instance as the apiservers' identity (2xx), and approved it.
	calls, err := framework.Booted.ARMCalls()
	if err != nil {
		t.Fatal(err)
	}
	approver, reads := machines.RehearsalClientIDs()[spec.RoleAPIServer], 0
	for _, c := range calls {
		if c.Client == approver && slices.Contains(azurerbac.CustomRoleActions[azurerbac.RoleScaleSetInstanceReader], c.Action) && strings.HasSuffix(c.Action, "/virtualMachines/read") && c.Status == 200 {
			reads++
		}
	}
	if reads < len(workers) {
		t.Errorf("the approver read %d worker instances through Resource Manager, want one per worker (%d) at least", reads, len(workers))
	}
	csrs, err := cs.CertificatesV1().CertificateSigningRequests().List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	joined := map[string]bool{}
	for _, c := range csrs.Items {
		for _, cond := range c.Status.Conditions {
			if c.Spec.SignerName == certv1.KubeAPIServerClientKubeletSignerName && cond.Type == certv1.CertificateApproved && cond.Reason == csrapprover.Reason {
				if f := strings.Fields(cond.Message); len(f) > 1 && f[0] == "node" {
					joined[f[1]] = true
				}
			}
		}
	}
	for _, w := range workers {
		if !joined[w] {
			t.Errorf("no join of %s approved by the CSR approver (approved: %v)", w, joined)
		}
	}

	// The join token, from the test host: it asks for certificates and reads its own back by
	// name; it lists no one's requests, and so no one's attested document.
	first, err := framework.Booted.Machine(workers[0])
	if err != nil {
		t.Fatal(err)
	}
	token := joinToken(t, poolOf(t, first.Name))
	if _, err := token.CertificatesV1().CertificateSigningRequests().List(ctx, metav1.ListOptions{}); !apierrors.IsForbidden(err) {
		t.Errorf("the join token listed the certificate requests: %v, want Forbidden by RBAC", err)
	}
	// Nor does it store what it likes in etcd: a request is the size of a genuine one.
	bulky, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	bulkyRequest, err := x509.CreateCertificateRequest(rand.Reader, &x509.CertificateRequest{Subject: pkix.Name{CommonName: pki.NodeUserPrefix + workers[0], Organization: []string{pki.NodesGroup}}}, bulky)
	if err != nil {
		t.Fatal(err)
	}
	_, err = token.CertificatesV1().CertificateSigningRequests().Create(ctx, &certv1.CertificateSigningRequest{
		ObjectMeta: metav1.ObjectMeta{GenerateName: "drill-join-", Annotations: map[string]string{wellknown.AttestedDocumentAnnotation: strings.Repeat("x", 100<<10)}},
		Spec: certv1.CertificateSigningRequestSpec{Request: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE REQUEST", Bytes: bulkyRequest}), SignerName: certv1.KubeAPIServerClientKubeletSignerName,
			Usages: []certv1.KeyUsage{certv1.UsageDigitalSignature, certv1.UsageClientAuth}},
	}, metav1.CreateOptions{})
	if err == nil || !strings.Contains(err.Error(), drills.RefusedBy(addons.JoinRequestsPolicy)) {
		t.Errorf("a join request with a 100 KiB annotation: %v, want the refusal of %s", err, addons.JoinRequestsPolicy)
	}
	// A new key and the first worker's own document bound to it, asked on that worker as its root could.
	attested := func() (*ecdsa.PrivateKey, string) { return attestedOn(t, ctx, workers[0]) }
	victim, err := framework.Booted.Machine(workers[len(workers)-1])
	if err != nil {
		t.Fatal(err)
	}
	own, theirs := machines.ResourceID(framework.Booted.Cluster, first.Role, first.Name), machines.ResourceID(framework.Booted.Cluster, victim.Role, victim.Name)
	none, _ := attested()
	key, doc := attested()
	ownKey, ownDoc := attested()
	// The worker asks again with a fresh document, then a copy of that document, written
	// otherwise, with the very key its nonce names (as if a search had found one).
	genuineKey, genuineDoc := attested()
	reencoded, err := imds.Reencoded(genuineDoc)
	if err != nil {
		t.Fatal(err)
	}
	ask := func(node, doc, instance string, key *ecdsa.PrivateKey) *certv1.CertificateSigningRequest {
		return askToJoin(t, ctx, token, node, doc, instance, key)
	}
	// The last worker's own document and instance, with another pool's token (asked for the last
	// worker: the first one's share of requests is spent below).
	foreignKey, foreignDoc := attestedOn(t, ctx, victim.Name)
	foreign := askToJoin(t, ctx, joinToken(t, otherPool(t, victim.Name)), victim.Name, foreignDoc, theirs, foreignKey)
	for _, tc := range []struct {
		name, node, doc, instance, denial string
		key                               *ecdsa.PrivateKey
		// asked is a request made otherwise than with the worker's own pool's token.
		asked *certv1.CertificateSigningRequest
	}{
		{"its own instance with another pool's token", victim.Name, "", theirs, "is not its join token", nil, foreign},
		{"no document", victim.Name, "", theirs, "no attested document", none, nil},
		{"another worker's document", victim.Name, doc, theirs, "the attested document is vmId", key, nil},
		{"its own instance under another name", victim.Name, ownDoc, own, "computer name", ownKey, nil},
		{"a second join of a worker whose node is alive", first.Name, genuineDoc, own, "is alive", genuineKey, nil},
		{"a re-encoded copy of that document, for its instance again", first.Name, reencoded, own, "the same attested document", genuineKey, nil},
	} {
		csr := tc.asked
		if csr == nil {
			csr = ask(tc.node, tc.doc, tc.instance, tc.key)
		}
		// Watched from its creation: a refused join request is removed at once, its verdict seen
		// on the way.
		c, gone, err := drills.CSRVerdict(ctx, cs, csr, 2*time.Minute)
		switch {
		case err != nil:
			t.Errorf("%s: %v", tc.name, err)
		case c.Type != certv1.CertificateDenied || c.Reason != csrapprover.Reason || !strings.Contains(c.Message, tc.denial):
			t.Errorf("%s: %s by %s (%s), want denied by the CSR approver for %q", tc.name, c.Type, c.Reason, c.Message, tc.denial)
		case !gone:
			t.Errorf("%s: denied and kept: a refused join request is removed at once, or the token fills etcd", tc.name)
		default:
			t.Logf("%s: %s: %s (removed %v)", tc.name, c.Type, c.Message, gone)
		}
	}

	// The worker's root asks in a loop, each time with a fresh document of its own instance: past
	// the instance's share the approver refuses without asking Resource Manager, and keeps up.
	const burst = 2 * csrapprover.JoinsPerInstance
	type asked struct {
		key *ecdsa.PrivateKey
		doc string
	}
	var loop []asked
	for range burst {
		key, doc := attested()
		loop = append(loop, asked{key, doc})
	}
	before, err := framework.Booted.ARMCalls()
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	var requests []*certv1.CertificateSigningRequest
	for _, a := range loop {
		requests = append(requests, ask(first.Name, a.doc, own, a.key))
	}
	limited := 0
	for _, csr := range requests {
		c, gone, err := drills.CSRVerdict(ctx, cs, csr, 2*time.Minute)
		switch {
		case err != nil:
			t.Errorf("burst: %v", err)
		case c.Type != certv1.CertificateDenied || !gone:
			t.Errorf("burst: %s: %s (%s), removed %v; want denied and removed", csr.Name, c.Type, c.Message, gone)
		case strings.Contains(c.Message, "asked for a certificate more than"):
			limited++
		}
	}
	settled := time.Since(start)
	after, err := framework.Booted.ARMCalls()
	if err != nil {
		t.Fatal(err)
	}
	reads = 0
	for _, c := range after[len(before):] {
		if c.Client == approver && strings.HasSuffix(c.Action, "/virtualMachines/read") {
			reads++
		}
	}
	t.Logf("a burst of %d join requests from one instance: settled in %s, %d refused as past its share, %d instance reads", burst, settled.Round(time.Millisecond), limited, reads)
	if limited < burst-csrapprover.JoinsPerInstance {
		t.Errorf("%d of the burst's %d requests refused as past the instance's share, want %d at least", limited, burst, burst-csrapprover.JoinsPerInstance)
	}
	if reads > burst-limited {
		t.Errorf("the approver read %d instances for the burst, but only %d of its requests were within the instance's share", reads, burst-limited)
	}
	if settled > time.Minute {
		t.Errorf("the approver took %s to settle a burst of %d requests, want a minute at most", settled, burst)
	}
}

// joinToken is a client of the booted cluster's join token of pool, from the test host.
func joinToken(t *testing.T, pool string) *kubernetes.Clientset {
	t.Helper()
	token, err := kubernetes.NewForConfig(&rest.Config{Host: framework.Booted.Cluster.APIServerURL(), BearerToken: pki.JoinToken(framework.Booted.Bundle.JoinSeed, pool),
		Dial: framework.Booted.Dial, TLSClientConfig: rest.TLSClientConfig{CAData: []byte(framework.Booted.Bundle.Pair(pki.ClusterCA).CertPEM)}})
	if err != nil {
		t.Fatal(err)
	}
	return token
}

// poolOf is the pool of the booted worker machine name.
func poolOf(t *testing.T, name string) string {
	t.Helper()
	m, err := framework.Booted.Machine(name)
	if err != nil {
		t.Fatal(err)
	}
	pool, ok := framework.Booted.Cluster.PoolOfRole(m.Role)
	if !ok {
		t.Fatalf("%s (role %s) is no pool's", name, m.Role)
	}
	return pool.Name
}

// otherPool is a pool of the booted cluster that worker name is not in.
func otherPool(t *testing.T, name string) string {
	t.Helper()
	own := poolOf(t, name)
	for _, p := range framework.Booted.Cluster.Pools {
		if p.Name != own {
			return p.Name
		}
	}
	t.Fatalf("the cluster has no pool but %s", own)
	return ""
}

// attestedOn is a new key and worker's own attested document bound to it, asked on that worker
// as its root could.
func attestedOn(t *testing.T, ctx context.Context, worker string) (*ecdsa.PrivateKey, string) {
	t.Helper()
	key, nonce, err := attestation.NewKey()
	if err != nil {
		t.Fatal(err)
	}
	doc, err := framework.Booted.Exec(ctx, worker, "curl", "-fsS", "-H", "Metadata: true", attestation.DocumentURL("http://"+wellknown.IMDSAddress, nonce))
	if err != nil {
		t.Fatal(err)
	}
	return key, doc
}

// askToJoin creates a join request with token for node, carrying doc and naming instance.
func askToJoin(t *testing.T, ctx context.Context, token *kubernetes.Clientset, node, doc, instance string, key *ecdsa.PrivateKey) *certv1.CertificateSigningRequest {
	t.Helper()
	request, err := x509.CreateCertificateRequest(rand.Reader, &x509.CertificateRequest{Subject: pkix.Name{CommonName: pki.NodeUserPrefix + node, Organization: []string{pki.NodesGroup}}}, key)
	if err != nil {
		t.Fatal(err)
	}
	csr, err := token.CertificatesV1().CertificateSigningRequests().Create(ctx, &certv1.CertificateSigningRequest{
		ObjectMeta: metav1.ObjectMeta{GenerateName: "drill-join-", Annotations: map[string]string{wellknown.AttestedDocumentAnnotation: doc, wellknown.ProviderIDAnnotation: scaleset.ProviderIDPrefix + instance}},
		Spec: certv1.CertificateSigningRequestSpec{Request: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE REQUEST", Bytes: request}),
			SignerName: certv1.KubeAPIServerClientKubeletSignerName, Usages: []certv1.KeyUsage{certv1.UsageDigitalSignature, certv1.UsageClientAuth}},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("a join request for %s: %v", node, err)
	}
	return csr
}
