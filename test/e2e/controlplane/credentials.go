package controlplane

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/base64"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	certv1 "k8s.io/api/certificates/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/clusterforge/clusterforge/components/csrapprover"
	"github.com/clusterforge/clusterforge/components/leader"
	"github.com/clusterforge/clusterforge/components/machine"
	"github.com/clusterforge/clusterforge/components/spec"
	"github.com/clusterforge/clusterforge/components/wellknown"
	"github.com/clusterforge/clusterforge/test/drills"
	"github.com/clusterforge/clusterforge/test/e2e/framework"
	"github.com/clusterforge/clusterforge/test/machines"
)

// The real audit logs of the apiservers record that a TokenRequest, a TokenReview and a Secret
// happened, never the token or the Secret's data.
func AuditLogHoldsNoCredentials(t *testing.T) {
	framework.NeedRehearsal(t)
	ctx := context.Background()
	cs := framework.Clientset(t)
	ns := drills.Namespace(t, cs, "audit")
	if _, err := cs.CoreV1().ServiceAccounts(ns).Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "probe"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	tr, err := cs.CoreV1().ServiceAccounts(ns).CreateToken(ctx, "probe", &authenticationv1.TokenRequest{}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	token := tr.Status.Token
	review, err := cs.AuthenticationV1().TokenReviews().Create(ctx, &authenticationv1.TokenReview{Spec: authenticationv1.TokenReviewSpec{Token: token}}, metav1.CreateOptions{})
	if err != nil || !review.Status.Authenticated {
		t.Fatalf("TokenReview: %v, authenticated %v", err, review != nil && review.Status.Authenticated)
	}
	secretValue := "audit-canary-" + rand.Text()
	if _, err := cs.CoreV1().Secrets(ns).Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "canary"},
		StringData: map[string]string{"v": secretValue}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	var log strings.Builder
	type event struct {
		ObjectRef struct{ Resource, Subresource, Namespace, Name string } `json:"objectRef"`
		Level     string                                                  `json:"level"`
	}
	recorded := map[string]string{} // "resource/subresource/name" -> level
	for _, in := range framework.Running.Of(spec.RoleAPIServer) {
		data, err := os.ReadFile(filepath.Join(framework.Running.Root(in.Name), machine.AuditLogPath))
		if err != nil {
			t.Fatal(err)
		}
		log.Write(data)
		for _, line := range strings.Split(strings.TrimSpace(string(data)), "\n") {
			var e event
			if err := json.Unmarshal([]byte(line), &e); err != nil {
				t.Fatalf("audit log line %q: %v", line, err)
			}
			r := e.ObjectRef
			recorded[r.Resource+"/"+r.Subresource+"/"+r.Name] = e.Level
		}
	}
	audit := log.String()
	for what, key := range map[string]string{
		"the TokenRequest": "serviceaccounts/token/probe",
		"the TokenReview":  "tokenreviews//",
		"the Secret":       "secrets//canary",
	} {
		if level := recorded[key]; level != "Metadata" {
			t.Errorf("the audit log records %s (%s) at level %q, want Metadata: without the event the check proves nothing", what, key, level)
		}
	}
	for what, secret := range map[string]string{
		"the service account token":    token,
		"the token's signature":        token[strings.LastIndex(token, ".")+1:],
		"the Secret's value":           secretValue,
		"the Secret's value in base64": base64.StdEncoding.EncodeToString([]byte(secretValue)),
	} {
		if strings.Contains(audit, secret) {
			t.Errorf("the audit log holds %s", what)
		}
	}
}

// clusterforge-csr-approver, running on the apiserver machines as rendered, denies a kubelet
// serving certificate that names another node's address, or a Service's name the node listed
// among its own addresses; and one naming the node's own address too, since KWOK's nodes name no
// instance (no provider ID) whose interface Resource Manager could vouch for. The booted drills
// see real workers' serving certificates approved, and issued by their own authority.
func KubeletServingCertificatesNeedTheNodesIdentity(t *testing.T) {
	framework.NeedRehearsal(t)
	ctx := context.Background()
	cs := framework.Clientset(t)
	nodes, err := cs.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
	if err != nil || len(nodes.Items) == 0 {
		t.Fatalf("nodes: %v", err)
	}
	node := nodes.Items[0].Name
	subnet := netip.MustParsePrefix(framework.Running.Cluster.NodeSubnets()[0])
	own, other := subnet.Addr().Next().Next().Next().Next(), subnet.Addr().Next().Next().Next().Next().Next()
	// As the kubelet would register it: its InternalIP inside the node subnet; and, as a node could
	// write it, a Service's name beside its host name. KWOK may write the addresses back at any
	// time; each case is refused whatever it wrote.
	const service = wellknown.OpsName + "." + metav1.NamespaceSystem + ".svc"
	patch := fmt.Sprintf(`{"status":{"addresses":[{"type":"InternalIP","address":%q},{"type":"Hostname","address":%q},{"type":"Hostname","address":%q}]}}`, own, node, service)
	if _, err := cs.CoreV1().Nodes().Patch(ctx, node, types.StrategicMergePatchType, []byte(patch), metav1.PatchOptions{}, "status"); err != nil {
		t.Fatal(err)
	}
	asNode := impersonate(t, "system:node:"+node, "system:nodes")
	for _, tc := range []struct {
		ip     netip.Addr
		dns    []string
		denial string
	}{
		{own, []string{node}, "is not a scale-set VM's"},
		{other, []string{node}, "is not one of the node's"},
		{own, []string{node, service}, "is not the node's"},
	} {
		name := fmt.Sprintf("serving-%s-%s-names-%d", node, strings.ReplaceAll(tc.ip.String(), ".", "-"), len(tc.dns))
		_, err := asNode.CertificatesV1().CertificateSigningRequests().Create(ctx, &certv1.CertificateSigningRequest{
			ObjectMeta: metav1.ObjectMeta{Name: name},
			Spec: certv1.CertificateSigningRequestSpec{
				Request: servingRequest(t, node, tc.dns, tc.ip), SignerName: certv1.KubeletServingSignerName,
				Usages: []certv1.KeyUsage{certv1.UsageDigitalSignature, certv1.UsageServerAuth},
			},
		}, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		var decided certv1.CertificateSigningRequestCondition
		if err := drills.WaitUntil(time.Minute, func() error {
			csr, err := cs.CertificatesV1().CertificateSigningRequests().Get(ctx, name, metav1.GetOptions{})
			if err != nil {
				return err
			}
			if len(csr.Status.Conditions) == 0 {
				return fmt.Errorf("pending")
			}
			decided = csr.Status.Conditions[0]
			return nil
		}); err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if decided.Type != certv1.CertificateDenied || decided.Reason != csrapprover.Reason || !strings.Contains(decided.Message, tc.denial) {
			t.Errorf("%s: %s by %s (%s), want denied by the approver for %q", name, decided.Type, decided.Reason, decided.Message, tc.denial)
		}
	}
}

func servingRequest(t *testing.T, node string, dns []string, ip netip.Addr) []byte {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	der, err := x509.CreateCertificateRequest(rand.Reader, &x509.CertificateRequest{
		Subject:  pkix.Name{CommonName: "system:node:" + node, Organization: []string{"system:nodes"}},
		DNSNames: dns, IPAddresses: []net.IP{net.IP(ip.AsSlice())},
	}, key)
	if err != nil {
		t.Fatal(err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE REQUEST", Bytes: der})
}

// impersonate is a client acting as user in groups, through the admin's impersonation right.
func impersonate(t *testing.T, user string, groups ...string) *kubernetes.Clientset {
	t.Helper()
	cfg, err := clientcmd.BuildConfigFromFlags("", framework.Running.Kubeconfig())
	if err != nil {
		t.Fatal(err)
	}
	cfg.Impersonate.UserName, cfg.Impersonate.Groups = user, append(groups, "system:authenticated")
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return cs
}

// The approver that leads loses its lease when its machine's apiserver is down past the lease's
// renewal deadline, and stands for election again without exiting: the same process runs on, says
// so in its log, and, its rivals frozen, holds the lease again once its apiserver is back. (It used
// to return and exit 0, which its unit did not restart: a few apiserver restarts left no approver.)
func CSRApproverStandsAgainAfterItsAPIServersOutage(t *testing.T) {
	framework.NeedRehearsal(t)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	cs := framework.Clientset(t)
	const approver = "clusterforge-csr-approver"
	var victim string
	if err := drills.WaitUntil(time.Minute, func() error {
		lease, err := cs.CoordinationV1().Leases(metav1.NamespaceSystem).Get(ctx, machine.CSRApproverLease, metav1.GetOptions{})
		if err == nil && (lease.Spec.HolderIdentity == nil || *lease.Spec.HolderIdentity == "") {
			err = fmt.Errorf("lease %s is not held", machine.CSRApproverLease)
		}
		if err == nil {
			victim = *lease.Spec.HolderIdentity
		}
		return err
	}); err != nil {
		t.Fatal(err)
	}
	before := framework.Running.Proc(victim, approver)
	if before == nil || !before.Alive() {
		t.Fatalf("the lease names %s, which runs no %s", victim, approver)
	}
	in, err := framework.Running.Instance(victim)
	if err != nil {
		t.Fatal(err)
	}
	// The log holds earlier scenarios' lines too: only what the approver writes from now counts.
	logged, err := os.ReadFile(before.Log)
	if err != nil {
		t.Fatal(err)
	}
	if err := framework.Running.Stop(victim, "kube-apiserver", syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { drills.Restart(t, framework.Running, []machines.Instance{in}, "") })
	down := time.Now()
	// Down until the approver has lost its lease, and a few of its retries past that.
	if err := drills.WaitUntil(time.Minute, func() error {
		log, err := os.ReadFile(before.Log)
		if err != nil || len(log) < len(logged) || !strings.Contains(string(log[len(logged):]), leader.LostLease) {
			return fmt.Errorf("%s on %s did not lose and stand for its lease (log %s): %v", approver, victim, before.Log, err)
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	t.Logf("%s lost its lease %.0f s into its apiserver's outage", victim, time.Since(down).Seconds())
	time.Sleep(3 * leader.DefaultTiming.RetryPeriod)
	drills.Restart(t, framework.Running, []machines.Instance{in}, "")
	t.Logf("%s's apiserver serving again after %.0f s", victim, time.Since(down).Seconds())
	if after := framework.Running.Proc(victim, approver); after != before || !after.Alive() {
		t.Fatalf("%s on %s exited during its apiserver's outage", approver, victim)
	}
	// Its rivals frozen, the lease can only come back to the victim if it stood again.
	for _, in := range framework.Running.Of(spec.RoleAPIServer) {
		if rival := framework.Running.Proc(in.Name, approver); in.Name != victim && rival != nil && rival.Alive() {
			if err := syscall.Kill(rival.PID, syscall.SIGSTOP); err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = syscall.Kill(rival.PID, syscall.SIGCONT) })
		}
	}
	back := time.Now()
	if err := drills.WaitUntil(time.Minute, func() error {
		lease, err := cs.CoordinationV1().Leases(metav1.NamespaceSystem).Get(ctx, machine.CSRApproverLease, metav1.GetOptions{})
		if err == nil && (lease.Spec.HolderIdentity == nil || *lease.Spec.HolderIdentity != victim ||
			lease.Spec.RenewTime == nil || lease.Spec.RenewTime.Time.Before(back)) {
			err = fmt.Errorf("lease %s is not %s's again since its apiserver came back: %v", machine.CSRApproverLease, victim, lease.Spec.HolderIdentity)
		}
		return err
	}); err != nil {
		t.Error(err)
	}
	t.Logf("%s led again %.0f s after its apiserver came back", victim, time.Since(back).Seconds())
}
