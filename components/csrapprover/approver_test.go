package csrapprover

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"net"
	"net/netip"
	"strings"
	"testing"
	"time"

	certv1 "k8s.io/api/certificates/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/clusterforge/clusterforge/components/attestation"
)

var subnet = netip.MustParsePrefix("10.1.0.0/16")

func request(t *testing.T, cn string, org []string, dns []string, ips []string) []byte {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.CertificateRequest{Subject: pkix.Name{CommonName: cn, Organization: org}, DNSNames: dns}
	for _, ip := range ips {
		tmpl.IPAddresses = append(tmpl.IPAddresses, net.ParseIP(ip))
	}
	der, err := x509.CreateCertificateRequest(rand.Reader, tmpl, key)
	if err != nil {
		t.Fatal(err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE REQUEST", Bytes: der})
}

func TestDecide(t *testing.T) {
	node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n1"}, Status: corev1.NodeStatus{Addresses: []corev1.NodeAddress{
		{Type: corev1.NodeInternalIP, Address: "10.1.2.3"}, {Type: corev1.NodeHostName, Address: "n1"},
		{Type: corev1.NodeHostName, Address: "clusterforge-ops.kube-system.svc"},
	}}}
	nodes := []string{"system:nodes", "system:authenticated"}
	serving := []certv1.KeyUsage{certv1.UsageDigitalSignature, certv1.UsageServerAuth}
	for _, tc := range []struct {
		name     string
		user     string
		groups   []string
		signer   string
		usages   []certv1.KeyUsage
		cn       string
		org      []string
		dns, ips []string
		node     *corev1.Node
		approve  bool
		reason   string
	}{
		{name: "the node's own names", dns: []string{"n1"}, ips: []string{"10.1.2.3"}, approve: true},
		{name: "another node's address", dns: []string{"n1"}, ips: []string{"10.1.2.4"}, reason: "not one of the node's"},
		{name: "address outside the subnet", ips: []string{"10.9.2.3"}, reason: "outside the node subnets"},
		{name: "another name", dns: []string{"n1", "kubernetes.default"}, reason: "not the node's"},
		// The node writes its own status: a Service's name among its addresses makes it no name of its own.
		{name: "a Service's name the node listed as its host name", dns: []string{"n1", "clusterforge-ops.kube-system.svc"}, reason: "not the node's"},
		{name: "requested by a user", user: "mallory", dns: []string{"n1"}, reason: "not a node"},
		{name: "not in system:nodes", groups: []string{"system:authenticated"}, dns: []string{"n1"}, reason: "not a node"},
		{name: "subject of another node", cn: "system:node:n2", dns: []string{"n1"}, reason: "not the requester"},
		{name: "wrong organization", org: []string{"system:masters"}, dns: []string{"n1"}, reason: "organization"},
		{name: "client usage", usages: []certv1.KeyUsage{certv1.UsageServerAuth, certv1.UsageClientAuth}, dns: []string{"n1"}, reason: "is not one of"},
		{name: "no server usage", usages: []certv1.KeyUsage{certv1.UsageDigitalSignature}, dns: []string{"n1"}, reason: "no \"server auth\" usage"},
		{name: "client signer", signer: certv1.KubeAPIServerClientKubeletSignerName, dns: []string{"n1"}, reason: "not a kubelet serving"},
		{name: "no Node", node: &corev1.Node{}, dns: []string{"n1"}, reason: "no Node"},
		{name: "no names", reason: "no names"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			user, groups, signer, usages, cn, org, n := "system:node:n1", nodes, certv1.KubeletServingSignerName, serving, "system:node:n1", []string{"system:nodes"}, node
			if tc.user != "" {
				user = tc.user
			}
			if tc.groups != nil {
				groups = tc.groups
			}
			if tc.signer != "" {
				signer = tc.signer
			}
			if tc.usages != nil {
				usages = tc.usages
			}
			if tc.cn != "" {
				cn = tc.cn
			}
			if tc.org != nil {
				org = tc.org
			}
			if tc.node != nil {
				n = nil
			}
			csr := &certv1.CertificateSigningRequest{Spec: certv1.CertificateSigningRequestSpec{
				Request: request(t, cn, org, tc.dns, tc.ips), SignerName: signer, Usages: usages, Username: user, Groups: groups,
			}}
			approve, reason := Decide(csr, n, []netip.Prefix{netip.MustParsePrefix("10.2.0.0/16"), subnet})
			if approve != tc.approve || !strings.Contains(reason, tc.reason) {
				t.Errorf("approve %v (%s), want %v (%s)", approve, reason, tc.approve, tc.reason)
			}
		})
	}
}

// A document is judged for the first request that carries it, whatever became of that request
// (a request of the same name made after it was removed is another); an instance's requests past
// JoinsPerInstance are refused, a request judged again counting once.
func TestJudgedRemembersDocumentsAndInstances(t *testing.T) {
	var j Judged
	req := func(name, uid string) *certv1.CertificateSigningRequest {
		return &certv1.CertificateSigningRequest{ObjectMeta: metav1.ObjectMeta{Name: name, UID: types.UID(uid)}}
	}
	original := req("join", "uid-1")
	for _, tc := range []struct {
		what string
		csr  *certv1.CertificateSigningRequest
	}{
		{"the original", original},
		{"the original judged again", original},
		{"a copy", req("copy", "uid-2")},
		{"a copy under the removed original's name", req("join", "uid-3")},
	} {
		if first := j.firstCarrier("doc", tc.csr); first.uid != original.UID {
			t.Errorf("%s: the first carrier is %s (%s), want the original", tc.what, first.name, first.uid)
		}
	}
	for i := range JoinsPerInstance {
		if !j.ask("vm-1", req("join", fmt.Sprint("vm-1-", i))) {
			t.Fatalf("request %d of the instance refused, want %d allowed", i+1, JoinsPerInstance)
		}
	}
	if !j.ask("vm-1", req("join", "vm-1-0")) {
		t.Error("a request judged again was counted twice")
	}
	if j.ask("vm-1", req("join", "one-too-many")) {
		t.Errorf("request %d of one instance allowed", JoinsPerInstance+1)
	}
	if !j.ask("vm-2", req("join", "vm-2-0")) {
		t.Error("another instance's first request refused")
	}
	// Requests older than a document's life count no more.
	for i := range JoinsPerInstance {
		j.asked["vm-3"] = append(j.asked["vm-3"], judgedRequest{"old", types.UID(fmt.Sprint("old-", i)), time.Now().Add(-attestation.MaxAge - time.Minute)})
	}
	if !j.ask("vm-3", req("new", "new")) {
		t.Error("an instance refused for requests older than a document's life")
	}
}

// A serving request names only its instance's own addresses, as Resource Manager assigned them.
func TestOwnAddresses(t *testing.T) {
	csr := func(ips ...string) *certv1.CertificateSigningRequest {
		return &certv1.CertificateSigningRequest{Spec: certv1.CertificateSigningRequestSpec{
			Request: request(t, "system:node:n1", []string{"system:nodes"}, []string{"n1"}, ips), Usages: []certv1.KeyUsage{certv1.UsageDigitalSignature, certv1.UsageServerAuth}}}
	}
	instance := []netip.Addr{netip.MustParseAddr("10.1.2.3")}
	for _, tc := range []struct {
		name    string
		csr     *certv1.CertificateSigningRequest
		approve bool
	}{
		{"its instance's address", csr("10.1.2.3"), true},
		{"its name only", csr(), true},
		{"another worker's address, reported as its own", csr("10.1.2.3", "10.1.2.4"), false},
	} {
		if approve, reason := OwnAddresses(tc.csr, instance); approve != tc.approve {
			t.Errorf("%s: approve %v (%s), want %v", tc.name, approve, reason, tc.approve)
		}
	}
}
