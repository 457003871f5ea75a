package offline

import (
	"crypto/tls"
	"crypto/x509"
	"encoding/base64"
	pemenc "encoding/pem"
	"slices"
	"strings"
	"testing"
	"time"

	"gopkg.in/yaml.v3"

	"github.com/clusterforge/clusterforge/components/addons"
	"github.com/clusterforge/clusterforge/components/pki"
	"github.com/clusterforge/clusterforge/components/spec"
	"github.com/clusterforge/clusterforge/components/wellknown"
)

// With a real PKI, the user-data carries it: the etcd member's serving pair is a working TLS key
// pair (the key matches the certificate) that its cluster's CA in the same user-data verifies, as
// does the apiserver's bundle of etcd server CAs; each etcd cluster's peer CA refuses the other's
// members, and its client bundle takes the apiserver's client certificate and the operators'; the
// admin kubeconfig trusts the cluster CA the apiserver machines get.
func TestPlanWithPKIWritesWorkingCertificates(t *testing.T) {
	_, bundle, r := planDevWithPKI(t)
	main, events := writtenFiles(t, r.UserData[spec.RoleEtcdMain]), writtenFiles(t, r.UserData[spec.RoleEtcdEvents])
	apiserver := writtenFiles(t, r.UserData[spec.RoleAPIServer])
	pair, err := tls.X509KeyPair([]byte(main["/etc/kubernetes/pki/etcd/etcd-main-server.crt"]), []byte(main["/etc/kubernetes/pki/etcd/etcd-main-server.key"]))
	if err != nil {
		t.Fatalf("etcd-main's serving pair: %v", err)
	}
	verifies := func(certPEM, rootsPEM string, usage x509.ExtKeyUsage) bool {
		roots := x509.NewCertPool()
		block, _ := pemenc.Decode([]byte(certPEM))
		if block == nil || !roots.AppendCertsFromPEM([]byte(rootsPEM)) {
			t.Fatalf("a certificate or trust file is missing from the user-data")
		}
		leaf, err := x509.ParseCertificate(block.Bytes)
		if err != nil {
			t.Fatal(err)
		}
		_, err = leaf.Verify(x509.VerifyOptions{Roots: roots, KeyUsages: []x509.ExtKeyUsage{usage}})
		return err == nil
	}
	server := string(pemenc.EncodeToMemory(&pemenc.Block{Type: "CERTIFICATE", Bytes: pair.Certificate[0]}))
	etcdClient := apiserver["/etc/kubernetes/pki/etcd/apiserver-etcd-client.crt"]
	for _, tc := range []struct {
		what, cert, roots string
		usage             x509.ExtKeyUsage
		want              bool
	}{
		{"etcd-main's CA, its serving certificate", server, main["/etc/kubernetes/pki/etcd/etcd-main-ca.crt"], x509.ExtKeyUsageServerAuth, true},
		{"the apiserver's etcd server CAs, etcd-main's serving certificate", server, apiserver["/etc/kubernetes/pki/etcd/etcd-servers-ca.crt"], x509.ExtKeyUsageServerAuth, true},
		{"the apiserver's etcd server CAs, etcd-events' serving certificate", events["/etc/kubernetes/pki/etcd/etcd-events-server.crt"], apiserver["/etc/kubernetes/pki/etcd/etcd-servers-ca.crt"], x509.ExtKeyUsageServerAuth, true},
		{"etcd-main's peer CA, etcd-events' peer certificate", events["/etc/kubernetes/pki/etcd/etcd-events-peer.crt"], main["/etc/kubernetes/pki/etcd/etcd-main-ca.crt"], x509.ExtKeyUsageClientAuth, false},
		{"etcd-events' peer CA, etcd-main's peer certificate", main["/etc/kubernetes/pki/etcd/etcd-main-peer.crt"], events["/etc/kubernetes/pki/etcd/etcd-events-ca.crt"], x509.ExtKeyUsageClientAuth, false},
		{"etcd-main's client CAs, the apiserver's etcd client", etcdClient, main["/etc/kubernetes/pki/etcd/etcd-clients-ca.crt"], x509.ExtKeyUsageClientAuth, true},
		{"etcd-events' client CAs, the apiserver's etcd client", etcdClient, events["/etc/kubernetes/pki/etcd/etcd-clients-ca.crt"], x509.ExtKeyUsageClientAuth, true},
		{"etcd-events' client CAs, etcd-main's peer", main["/etc/kubernetes/pki/etcd/etcd-main-peer.crt"], events["/etc/kubernetes/pki/etcd/etcd-clients-ca.crt"], x509.ExtKeyUsageClientAuth, false},
		{"etcd-main's client CAs, the operators' etcd client", bundle.Pair(pki.OperatorEtcdClient).CertPEM, main["/etc/kubernetes/pki/etcd/etcd-clients-ca.crt"], x509.ExtKeyUsageClientAuth, true},
	} {
		if got := verifies(tc.cert, tc.roots, tc.usage); got != tc.want {
			t.Errorf("%s: verifies %v, want %v", tc.what, got, tc.want)
		}
	}
	// The operators' etcd client (the etcdClient output) is on no machine and dies within a month,
	// as the admin kubeconfig does; the apiservers' own lives on their machines only.
	operator := bundle.Pair(pki.OperatorEtcdClient)
	for role, userData := range r.UserData {
		if strings.Contains(userData, strings.Split(strings.TrimSpace(operator.KeyPEM), "\n")[1]) {
			t.Errorf("%s's user-data holds the operators' etcd client key", role)
		}
	}
	block, _ := pemenc.Decode([]byte(operator.CertPEM))
	if block == nil {
		t.Fatal("no operators' etcd client certificate")
	}
	cert, err := x509.ParseCertificate(block.Bytes)
	if err != nil {
		t.Fatal(err)
	}
	if life := cert.NotAfter.Sub(cert.NotBefore); life > 31*24*time.Hour {
		t.Errorf("the operators' etcd client certificate lives %s, want a month at most", life)
	}
	ca := apiserver["/etc/kubernetes/pki/kubernetes-ca.crt"]
	for name, kubeconfig := range r.Kubeconfigs {
		if ca == "" || !strings.Contains(kubeconfig, "certificate-authority-data: "+base64.StdEncoding.EncodeToString([]byte(ca))) {
			t.Errorf("kubeconfig of %s does not trust the cluster CA of the apiserver machines", name)
		}
	}
}

// The ops webhooks' serving pair goes into its Secret as a secret, and the webhook configurations
// trust the CA that signed it, for the name the apiservers dial (the Service's): crypto/x509 checks.
func TestOpsWebhooksTrustTheirServingPair(t *testing.T) {
	c, bundle, r := planDevWithPKI(t)
	var secret, webhooks []Resource
	for _, res := range r.Resources {
		switch {
		case res.Name == c.Name+"-addons-secret-kube-system-"+addons.OpsTLSSecret:
			secret = append(secret, res)
		case strings.HasSuffix(res.Type, "WebhookConfiguration"):
			webhooks = append(webhooks, res)
		}
	}
	if len(secret) != 1 || len(webhooks) != 3 {
		t.Fatalf("%d serving Secrets and %d webhook configurations registered, want 1 and 3 (the brake, team tolerations and team objects)", len(secret), len(webhooks))
	}
	if data := field(secret[0].Inputs, "stringData"); data != "[secret]" {
		t.Errorf("the serving pair's Secret data is %v, want a Pulumi secret", data)
	}
	ops := bundle.Pair(pki.OpsWebhook)
	pair, err := tls.X509KeyPair([]byte(ops.CertPEM), []byte(ops.KeyPEM))
	if err != nil {
		t.Fatalf("the serving pair: %v", err)
	}
	leaf, _ := x509.ParseCertificate(pair.Certificate[0])
	for _, w := range webhooks {
		list, _ := field(w.Inputs, "webhooks").([]any)
		for _, hook := range list {
			caBundle, _ := field(hook, "clientConfig", "caBundle").(string)
			ca, err := base64.StdEncoding.DecodeString(caBundle)
			roots := x509.NewCertPool()
			if err != nil || !roots.AppendCertsFromPEM(ca) {
				t.Fatalf("%s: caBundle %q is not a base64 PEM certificate", w.Name, caBundle)
			}
			if _, err := leaf.Verify(x509.VerifyOptions{Roots: roots, DNSName: wellknown.OpsName + "." + addons.SystemNamespace + ".svc"}); err != nil {
				t.Errorf("%s: its caBundle does not verify the serving certificate for the Service's name: %v", w.Name, err)
			}
		}
	}
}

// planDevWithPKI plans the dev stack with a real PKI, issued here.
// credentialOutputs are the outputs of each kind of resource the program makes credentials with
// (the PKI, the join token, the encryption key, kubeconfigs and the handoff read them): each must
// be secret, so the state holds it encrypted.
var credentialOutputs = map[string][]string{
	"random:index/randomString:RandomString":     {"result"},
	"random:index/randomPassword:RandomPassword": {"result"},
	"random:index/randomBytes:RandomBytes":       {"base64", "hex"},
	"tls:index/privateKey:PrivateKey":            {"privateKeyPem", "privateKeyOpenssh", "privateKeyPemPkcs8"},
}

// No credential sits in the state in the clear: every output of a resource that makes one is
// secret (the engine encrypts secrets with the stack's passphrase or key).
func TestCredentialOutputsAreSecret(t *testing.T) {
	for stack, r := range planAll(t) {
		seen := map[string]bool{}
		for _, res := range r.Resources {
			for _, out := range credentialOutputs[res.Type] {
				seen[res.Type] = true
				if !slices.Contains(res.SecretOutputs, out) {
					t.Errorf("%s: %s %s: output %q is not secret (secret: %v)", stack, res.Type, res.Name, out, res.SecretOutputs)
				}
			}
		}
		if !seen["random:index/randomString:RandomString"] || !seen["tls:index/privateKey:PrivateKey"] {
			t.Errorf("%s: no join token or private key among the resources: the test reads nothing", stack)
		}
	}
}

func planDevWithPKI(t *testing.T) (*spec.Cluster, pki.Bundle, *Result) {
	t.Helper()
	c, err := spec.LoadStack(stackFile("dev"))
	if err != nil {
		t.Fatal(err)
	}
	bundle, err := pki.Issue(pki.Authorities(c), pki.Profiles(c))
	if err != nil {
		t.Fatal(err)
	}
	r, err := Run("dev", stackFile("dev"), &bundle)
	if err != nil {
		t.Fatal(err)
	}
	return c, bundle, r
}

// writtenFiles are the write_files of a #cloud-config document, by path.
func writtenFiles(t *testing.T, userData string) map[string]string {
	t.Helper()
	var doc struct {
		WriteFiles []struct{ Path, Content string } `yaml:"write_files"`
	}
	if err := yaml.Unmarshal([]byte(userData), &doc); err != nil {
		t.Fatal(err)
	}
	files := map[string]string{}
	for _, f := range doc.WriteFiles {
		files[f.Path] = f.Content
	}
	return files
}
