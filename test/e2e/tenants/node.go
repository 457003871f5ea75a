package tenants

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"net"
	"strings"
	"testing"
	"time"

	certv1 "k8s.io/api/certificates/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

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
// Service's name among its addresses, and a serving certificate for that name. Each is refused by
// what should refuse it.
func CompromisedNodeStaysItself(t *testing.T) {
	framework.NeedBoot(t)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	admin := drills.Clientset(t, framework.Booted)
	worker := framework.WorkerNames()[0]
	node := asNode(t, ctx, worker)
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

	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	der, err := x509.CreateCertificateRequest(rand.Reader, &x509.CertificateRequest{
		Subject:  pkix.Name{CommonName: pki.NodeUserPrefix + worker, Organization: []string{pki.NodesGroup}},
		DNSNames: []string{worker, service}, IPAddresses: []net.IP{net.ParseIP(ip)}}, key)
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
	if err := drills.WaitUntil(time.Minute, func() error {
		got, err := admin.CertificatesV1().CertificateSigningRequests().Get(ctx, csr.Name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		for _, c := range got.Status.Conditions {
			if c.Type != certv1.CertificateDenied || c.Reason != csrapprover.Reason || !strings.Contains(c.Message, service) {
				t.Errorf("a serving certificate for %s: %s by %s (%s), want denied by the CSR approver", service, c.Type, c.Reason, c.Message)
			}
			return nil
		}
		return fmt.Errorf("a serving certificate for %s: pending", service)
	}); err != nil {
		t.Error(err)
	}
}

// asNode is a client with the kubelet's own client certificate, as root on the worker reads it.
func asNode(t *testing.T, ctx context.Context, worker string) *kubernetes.Clientset {
	t.Helper()
	pair, err := framework.Booted.Exec(ctx, worker, "cat", machine.KubeletClientCert)
	if err != nil {
		t.Fatal(err)
	}
	cs, err := kubernetes.NewForConfig(&rest.Config{Host: framework.Booted.Cluster.APIServerURL(), Dial: framework.Booted.Dial,
		TLSClientConfig: rest.TLSClientConfig{CAData: []byte(framework.Booted.Bundle.Pair(pki.ClusterCA).CertPEM), CertData: []byte(pair), KeyData: []byte(pair)}})
	if err != nil {
		t.Fatal(err)
	}
	return cs
}
