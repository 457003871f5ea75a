package tenants

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"net"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	certv1 "k8s.io/api/certificates/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/clusterforge/clusterforge/components/addons"
	"github.com/clusterforge/clusterforge/components/csrapprover"
	"github.com/clusterforge/clusterforge/components/machine"
	"github.com/clusterforge/clusterforge/components/pki"
	"github.com/clusterforge/clusterforge/components/wellknown"
	"github.com/clusterforge/clusterforge/test/drills"
	"github.com/clusterforge/clusterforge/test/e2e/framework"
)

// Root on one worker, with the kubelet's own client certificate, tries to become an endpoint of
// the platform's webhooks: a mirror pod in kube-system carrying clusterforge-ops's labels, a
// Service's name among its addresses, and a serving certificate for that name; it also claims a GPU
// its CPU instance lacks. Each is refused by what should refuse it. And the serving certificate a
// node is issued, as its kubelet serves it, convinces neither a pod (the cluster CA of
// kube-root-ca.crt) nor the apiservers dialling a webhook (every webhook configuration's caBundle).
func CompromisedNodeStaysItself(t *testing.T) {
	framework.NeedBoot(t)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	admin := drills.Clientset(t, framework.Booted)
	worker := framework.WorkerNames()[0]
	node := framework.AsNode(t, ctx, worker)
	const service = wellknown.OpsName + "." + addons.SystemNamespace + ".svc"

	ops, err := admin.AppsV1().Deployments(addons.SystemNamespace).Get(ctx, wellknown.OpsName, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	self, err := node.CoreV1().Nodes().Get(ctx, worker, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	// Owned by its node, as NodeRestriction requires of a mirror pod.
	mirror := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "drill-mirror-" + worker, Labels: ops.Spec.Selector.MatchLabels,
		Annotations:     map[string]string{corev1.MirrorPodAnnotationKey: "drill"},
		OwnerReferences: []metav1.OwnerReference{{APIVersion: "v1", Kind: "Node", Name: worker, UID: self.UID, Controller: framework.Ptr(true)}}},
		Spec: corev1.PodSpec{NodeName: worker, Containers: []corev1.Container{{Name: "app", Image: framework.Booted.Cluster.Versions.PauseImage}}}}
	if _, err := node.CoreV1().Pods(addons.SystemNamespace).Create(ctx, mirror, metav1.CreateOptions{}); err == nil || !strings.Contains(err.Error(), drills.RefusedBy(addons.NodePodsPolicy)) {
		t.Errorf("a mirror pod with clusterforge-ops's labels: %v, want the refusal of %s", err, addons.NodePodsPolicy)
	}

	ip := nodeIP(*self)
	self.Status.Addresses = append(self.Status.Addresses, corev1.NodeAddress{Type: corev1.NodeHostName, Address: service})
	if _, err := node.CoreV1().Nodes().UpdateStatus(ctx, self, metav1.UpdateOptions{}); err == nil || !strings.Contains(err.Error(), drills.RefusedBy(addons.NodeAddressesPolicy)) {
		t.Errorf("%s among the node's addresses: %v, want the refusal of %s", service, err, addons.NodeAddressesPolicy)
	}

	// A CPU worker claiming a GPU it lacks would draw GPU pods to itself.
	claim, err := node.CoreV1().Nodes().Get(ctx, worker, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	gpu := corev1.ResourceName(machine.GPUResource)
	claim.Status.Capacity[gpu], claim.Status.Allocatable[gpu] = resource.MustParse("1"), resource.MustParse("1")
	if _, err := node.CoreV1().Nodes().UpdateStatus(ctx, claim, metav1.UpdateOptions{DryRun: []string{metav1.DryRunAll}}); err == nil ||
		!strings.Contains(err.Error(), drills.RefusedBy(addons.NodeCapacityPolicy)) {
		t.Errorf("a CPU worker reporting a GPU: %v, want the refusal of %s", err, addons.NodeCapacityPolicy)
	}

	// NodeRestriction lets a node register its Node with any taints: the registration policy refuses
	// one without its pool's taints (the first worker is the system pool's, tainted) and one with a
	// team's. Deleting its Node to register again is refused by the authorizer already (the policy
	// would too).
	dryRun := []string{metav1.DryRunAll}
	if err := node.CoreV1().Nodes().Delete(ctx, worker, metav1.DeleteOptions{DryRun: dryRun}); !apierrors.IsForbidden(err) {
		t.Errorf("the node deleting its own Node: %v, want Forbidden", err)
	}
	if len(self.Spec.Taints) == 0 {
		t.Fatalf("%s has no taints: the drill needs a worker of a tainted pool", worker)
	}
	for _, tc := range []struct {
		what, refusal string
		taints        []corev1.Taint
	}{
		{"without its pool's taints", "every taint of its pool", nil},
		{"with a team's taint", "no taint a controller sets", append(slices.Clone(self.Spec.Taints),
			corev1.Taint{Key: wellknown.TeamKey, Value: "drill", Effect: corev1.TaintEffectNoSchedule})},
	} {
		fresh := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: worker, Labels: map[string]string{corev1.LabelHostname: worker}}, Spec: corev1.NodeSpec{Taints: tc.taints}}
		if _, err := node.CoreV1().Nodes().Create(ctx, fresh, metav1.CreateOptions{DryRun: dryRun}); err == nil ||
			!strings.Contains(err.Error(), drills.RefusedBy(addons.NodeRegistrationPolicy)) || !strings.Contains(err.Error(), tc.refusal) {
			t.Errorf("the node registering %s: %v, want the refusal of %s saying %q", tc.what, err, addons.NodeRegistrationPolicy, tc.refusal)
		}
	}

	serving := func(dns []string, ips ...string) *certv1.CertificateSigningRequest {
		key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
		if err != nil {
			t.Fatal(err)
		}
		tmpl := &x509.CertificateRequest{Subject: pkix.Name{CommonName: pki.NodeUserPrefix + worker, Organization: []string{pki.NodesGroup}}, DNSNames: dns}
		for _, ip := range ips {
			tmpl.IPAddresses = append(tmpl.IPAddresses, net.ParseIP(ip))
		}
		der, err := x509.CreateCertificateRequest(rand.Reader, tmpl, key)
		if err != nil {
			t.Fatal(err)
		}
		csr, err := node.CertificatesV1().CertificateSigningRequests().Create(ctx, &certv1.CertificateSigningRequest{
			ObjectMeta: metav1.ObjectMeta{GenerateName: "drill-serving-"},
			Spec: certv1.CertificateSigningRequestSpec{Request: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE REQUEST", Bytes: der}),
				SignerName: certv1.KubeletServingSignerName, Usages: []certv1.KeyUsage{certv1.UsageDigitalSignature, certv1.UsageServerAuth}},
		}, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		return csr
	}
	// verdict waits for the approver's verdict on csr.
	verdict := func(csr *certv1.CertificateSigningRequest) (c certv1.CertificateSigningRequestCondition) {
		if err := drills.WaitUntil(time.Minute, func() error {
			got, err := admin.CertificatesV1().CertificateSigningRequests().Get(ctx, csr.Name, metav1.GetOptions{})
			if err != nil {
				return err
			}
			if len(got.Status.Conditions) == 0 {
				return fmt.Errorf("%s: pending", csr.Name)
			}
			c = got.Status.Conditions[0]
			return nil
		}); err != nil {
			t.Fatal(err)
		}
		return c
	}
	denied := func(what string, c certv1.CertificateSigningRequestCondition, because string) {
		if c.Type != certv1.CertificateDenied || c.Reason != csrapprover.Reason || !strings.Contains(c.Message, because) {
			t.Errorf("%s: %s by %s (%s), want denied by the CSR approver for %q", what, c.Type, c.Reason, c.Message, because)
		} else {
			t.Logf("%s: denied: %s", what, c.Message)
		}
	}
	denied("a serving certificate for "+service, verdict(serving([]string{worker, service}, ip)), service)

	// Another worker's address among its own InternalIPs (no policy holds a node's addresses),
	// then a serving certificate for it: the instance's interface in Resource Manager says no.
	// The kubelet writes its own addresses back within its status period (10 s), and the approver
	// judges from its cache of the Node: should the address be gone, or not yet in its cache, when
	// it judges, the node's report refuses the request first, and the drill asks again (adding the
	// address only if it is gone: a Node may not list one twice).
	peer, err := admin.CoreV1().Nodes().Get(ctx, framework.WorkerNames()[1], metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	other := nodeIP(*peer)
	what := "a serving certificate for " + other + ", another worker's address it reports"
	for attempt := 1; ; attempt++ {
		if self, err = node.CoreV1().Nodes().Get(ctx, worker, metav1.GetOptions{}); err != nil {
			t.Fatal(err)
		}
		if !slices.ContainsFunc(self.Status.Addresses, func(a corev1.NodeAddress) bool { return a.Address == other }) {
			self.Status.Addresses = append(self.Status.Addresses, corev1.NodeAddress{Type: corev1.NodeInternalIP, Address: other})
			if _, err := node.CoreV1().Nodes().UpdateStatus(ctx, self, metav1.UpdateOptions{}); err != nil {
				t.Fatalf("%s among the node's InternalIPs: %v", other, err)
			}
		}
		c := verdict(serving([]string{worker}, ip, other))
		if strings.Contains(c.Message, "is not one of the node's") && attempt < 3 {
			t.Logf("%s: the node's report did not hold it when the approver judged (%s); again", what, c.Message)
			continue
		}
		denied(what, c, "is not its instance's")
		break
	}

	served := kubeletServingCertificate(t, ip)
	trusts := map[string][]byte{}
	if rootCA, err := admin.CoreV1().ConfigMaps(metav1.NamespaceDefault).Get(ctx, "kube-root-ca.crt", metav1.GetOptions{}); err != nil {
		t.Fatal(err)
	} else {
		trusts["a pod's kube-root-ca.crt"] = []byte(rootCA.Data["ca.crt"])
	}
	validating, err := admin.AdmissionregistrationV1().ValidatingWebhookConfigurations().List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, w := range validating.Items {
		for _, h := range w.Webhooks {
			trusts["webhook "+h.Name] = h.ClientConfig.CABundle
		}
	}
	mutating, err := admin.AdmissionregistrationV1().MutatingWebhookConfigurations().List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, w := range mutating.Items {
		for _, h := range w.Webhooks {
			trusts["webhook "+h.Name] = h.ClientConfig.CABundle
		}
	}
	trusts[pki.KubeletServingCA] = []byte(framework.Booted.Bundle.Pair(pki.KubeletServingCA).CertPEM)
	for who, caPEM := range trusts {
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(caPEM) {
			t.Errorf("%s: no certificate", who)
			continue
		}
		_, err := served.Verify(x509.VerifyOptions{Roots: pool, DNSName: worker, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}})
		switch {
		case who == pki.KubeletServingCA && err != nil: // the control: it is a genuine serving certificate
			t.Errorf("%s's kubelet serves a certificate %s does not verify: %v", worker, who, err)
		case who != pki.KubeletServingCA && err == nil:
			t.Errorf("%s's kubelet serving certificate is trusted by %s", worker, who)
		}
	}
}

// kubeletServingCertificate is the certificate the kubelet at ip serves, read in a handshake.
func kubeletServingCertificate(t *testing.T, ip string) *x509.Certificate {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	raw, err := framework.Booted.Dial(ctx, "tcp", net.JoinHostPort(ip, strconv.Itoa(wellknown.KubeletPort)))
	if err != nil {
		t.Fatal(err)
	}
	conn := tls.Client(raw, &tls.Config{InsecureSkipVerify: true}) // read, then verified against each trust
	defer conn.Close()
	if err := conn.HandshakeContext(ctx); err != nil {
		t.Fatalf("handshake with the kubelet at %s: %v", ip, err)
	}
	return conn.ConnectionState().PeerCertificates[0]
}
