// Package nodejoin gets a new worker its kubelet's client certificate, proving which Azure
// instance it is: it asks the instance metadata service for the instance's attested document,
// with the nonce bound to the key of its certificate request, and sends both in the request with
// the join token. The apiservers' CSR approver checks them (components/csrapprover); the kubelet
// then starts with the certificate. It renews the certificate the same way, as the node, each time
// half of its short life (pki.NodeClientLifetime) is left; the kubelet reads the files again.
package nodejoin

import (
	"context"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/hex"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"io"
	mathrand "math/rand/v2"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"time"

	certv1 "k8s.io/api/certificates/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
	"k8s.io/client-go/util/certificate"
	"k8s.io/utils/ptr"

	"github.com/clusterforge/clusterforge/components/attestation"
	"github.com/clusterforge/clusterforge/components/pki"
	"github.com/clusterforge/clusterforge/components/wellknown"
)

// Config is what one join needs.
type Config struct {
	// NodeName is the name the node registers, its instance's computer name.
	NodeName string
	// ProviderID is the instance's provider ID (azure://<resource ID>), from the metadata service.
	ProviderID string
	// Metadata is the metadata service's base URL.
	Metadata            string
	BootstrapKubeconfig string
	// Kubeconfig is written for the kubelet, naming ClientCert.
	Kubeconfig string
	// ClientCert is the kubelet's current client certificate and key: a link to a dated file
	// beside it, as the kubelet's certificate store keeps them and rotates them.
	ClientCert string
	// Retry is the wait between attempts; each attempt asks anew.
	Retry time.Duration
	Logf  func(format string, args ...any)
}

// Join returns once the kubelet holds a valid client certificate, trying until ctx ends.
func Join(ctx context.Context, cfg Config) error {
	if joined(cfg) {
		cfg.Logf("the kubelet already holds a valid client certificate")
		return nil
	}
	if _, err := os.Stat(cfg.BootstrapKubeconfig); err != nil {
		return fmt.Errorf("no join token (it leaves the machine after the first join; a reimage brings it back): %w", err)
	}
	for {
		err := join(ctx, cfg)
		if err == nil {
			return nil
		}
		cfg.Logf("join: %v; trying again in %s", err, cfg.Retry)
		select {
		case <-ctx.Done():
			return err
		case <-time.After(cfg.Retry):
		}
	}
}

// joined says whether the kubelet's kubeconfig and an unexpired certificate are there: Renew
// keeps it fresh, and the join token is gone after the first join.
func joined(cfg Config) bool {
	if _, err := os.Stat(cfg.Kubeconfig); err != nil {
		return false
	}
	store, err := store(cfg.ClientCert)
	if err != nil {
		return false
	}
	current, err := store.Current()
	return err == nil && current.Leaf != nil && time.Now().Before(current.Leaf.NotAfter)
}

// store is the kubelet's own certificate store of its client pair: current is the
// "<prefix>-current.pem" link to a dated pair beside it.
func store(current string) (certificate.FileStore, error) {
	prefix, ok := strings.CutSuffix(filepath.Base(current), "-current.pem")
	if !ok {
		return nil, fmt.Errorf("%s is not a certificate store's <prefix>-current.pem", current)
	}
	dir := filepath.Dir(current)
	return certificate.NewFileStore(prefix, dir, dir, "", "")
}

// join makes one attempt with the join token, then writes the kubelet's kubeconfig.
func join(ctx context.Context, cfg Config) error {
	restCfg, err := clientcmd.BuildConfigFromFlags("", cfg.BootstrapKubeconfig)
	if err != nil {
		return err
	}
	// The join token may create and read requests, not list them: a name no one can guess keeps
	// this one's document from the other holders of the token.
	if err := obtain(ctx, cfg, restCfg, "node-join-"); err != nil {
		return err
	}
	kubeconfig := clientcmdapi.NewConfig()
	kubeconfig.Clusters["default-cluster"] = &clientcmdapi.Cluster{Server: restCfg.Host, CertificateAuthority: restCfg.CAFile, CertificateAuthorityData: restCfg.CAData}
	kubeconfig.AuthInfos["default-auth"] = &clientcmdapi.AuthInfo{ClientCertificate: cfg.ClientCert, ClientKey: cfg.ClientCert}
	kubeconfig.Contexts["default-context"] = &clientcmdapi.Context{Cluster: "default-cluster", AuthInfo: "default-auth"}
	kubeconfig.CurrentContext = "default-context"
	if err := clientcmd.WriteToFile(*kubeconfig, cfg.Kubeconfig); err != nil {
		return err
	}
	cfg.Logf("joined as %s: the kubelet holds its client certificate", cfg.NodeName)
	return nil
}

// Renew keeps the kubelet's client certificate fresh until ctx ends: once half of its life is
// left it asks for the next as the node (the kubelet's own kubeconfig), with a new key and its
// instance's attested document, which the CSR approver checks as it checks a join. A refused or
// failed renewal is tried again after cfg.Retry; the current certificate lasts meanwhile.
func Renew(ctx context.Context, cfg Config) error {
	for {
		wait, err := renewIfDue(ctx, cfg, false)
		if err != nil {
			cfg.Logf("renew: %v; trying again in %s", err, cfg.Retry)
			wait = cfg.Retry
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(wait):
		}
	}
}

// RenewNow renews the kubelet's client certificate once, whatever is left of the current one.
func RenewNow(ctx context.Context, cfg Config) error {
	_, err := renewIfDue(ctx, cfg, true)
	return err
}

// renewIfDue renews the certificate when half of its life is left, or now, and says how long
// until the next renewal is due.
func renewIfDue(ctx context.Context, cfg Config, now bool) (time.Duration, error) {
	certs, err := store(cfg.ClientCert)
	if err != nil {
		return 0, err
	}
	current, err := certs.Current()
	if err != nil || current.Leaf == nil {
		return 0, fmt.Errorf("the kubelet's client certificate: %v", err)
	}
	if until := time.Until(halfLife(current.Leaf)); until > 0 && !now {
		return until, nil
	}
	restCfg, err := clientcmd.BuildConfigFromFlags("", cfg.Kubeconfig)
	if err != nil {
		return 0, err
	}
	if err := obtain(ctx, cfg, restCfg, "node-renew-"); err != nil {
		return 0, err
	}
	next, err := certs.Current()
	if err != nil {
		return 0, err
	}
	cfg.Logf("renewed the kubelet's client certificate as %s, valid until %s", cfg.NodeName, next.Leaf.NotAfter.UTC().Format(time.RFC3339))
	return time.Until(halfLife(next.Leaf)), nil
}

func halfLife(cert *x509.Certificate) time.Time {
	return cert.NotBefore.Add(cert.NotAfter.Sub(cert.NotBefore) / 2)
}

// obtain makes one attempt at a client certificate of pki.NodeClientLifetime, as restCfg
// authenticates: a new key, its attested document, the request named prefix and random bits,
// and the wait; it stores the pair as the kubelet's current one.
func obtain(ctx context.Context, cfg Config, restCfg *rest.Config, prefix string) error {
	key, nonce, err := attestation.NewKey()
	if err != nil {
		return err
	}
	request, err := x509.CreateCertificateRequest(rand.Reader, &x509.CertificateRequest{
		Subject: pkix.Name{CommonName: pki.NodeUserPrefix + cfg.NodeName, Organization: []string{pki.NodesGroup}}}, key)
	if err != nil {
		return err
	}
	doc, err := attested(ctx, cfg.Metadata, nonce)
	if err != nil {
		return err
	}
	client, err := kubernetes.NewForConfig(restCfg)
	if err != nil {
		return err
	}
	suffix := make([]byte, 16)
	if _, err := rand.Read(suffix); err != nil {
		return err
	}
	csr, err := client.CertificatesV1().CertificateSigningRequests().Create(ctx, &certv1.CertificateSigningRequest{
		ObjectMeta: metav1.ObjectMeta{Name: prefix + cfg.NodeName + "-" + hex.EncodeToString(suffix), Annotations: map[string]string{
			wellknown.AttestedDocumentAnnotation: doc, wellknown.ProviderIDAnnotation: cfg.ProviderID}},
		Spec: certv1.CertificateSigningRequestSpec{
			Request:           pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE REQUEST", Bytes: request}),
			SignerName:        certv1.KubeAPIServerClientKubeletSignerName,
			Usages:            []certv1.KeyUsage{certv1.UsageDigitalSignature, certv1.UsageClientAuth},
			ExpirationSeconds: ptr.To(int32(pki.NodeClientLifetime / time.Second)),
		},
	}, metav1.CreateOptions{})
	if err != nil {
		return fmt.Errorf("certificate request: %w", err)
	}
	cfg.Logf("asked for a client certificate as %s (request %s)", cfg.NodeName, csr.Name)
	wait, cancel := context.WithTimeout(ctx, attestation.MaxAge)
	defer cancel()
	cert, err := issued(wait, client, csr)
	if err != nil {
		return fmt.Errorf("request %s: %w", csr.Name, err)
	}
	keyDER, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		return err
	}
	certs, err := store(cfg.ClientCert)
	if err != nil {
		return err
	}
	_, err = certs.Update(cert, pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: keyDER}))
	return err
}

// A join reads its request back after pollEvery, then each wait half as long again up to
// pollAtMost, each within a quarter either way: a pool's join step polls thousands of requests at
// once, most approved within seconds.
const (
	pollEvery  = 2 * time.Second
	pollAtMost = 20 * time.Second
)

// issued reads the request back by its name, which is all the join token may read, until it is
// issued, denied or failed, or ctx ends.
func issued(ctx context.Context, client kubernetes.Interface, csr *certv1.CertificateSigningRequest) ([]byte, error) {
	for wait := pollEvery; ; wait = min(wait*3/2, pollAtMost) {
		got, err := client.CertificatesV1().CertificateSigningRequests().Get(ctx, csr.Name, metav1.GetOptions{})
		switch {
		case apierrors.IsNotFound(err):
			return nil, fmt.Errorf("refused: the approver removes the join requests it refuses, and logs why")
		case err != nil:
			if ctx.Err() != nil {
				return nil, err
			}
		case got.UID != csr.UID:
			return nil, fmt.Errorf("replaced by another request of the same name")
		default:
			for _, c := range got.Status.Conditions {
				if c.Type == certv1.CertificateDenied || c.Type == certv1.CertificateFailed {
					return nil, fmt.Errorf("%s: %s", c.Type, c.Message)
				}
			}
			if len(got.Status.Certificate) > 0 {
				return got.Status.Certificate, nil
			}
		}
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("no certificate yet: %w", ctx.Err())
		case <-time.After(wait*3/4 + mathrand.N(wait/2)):
		}
	}
}

// attested asks the metadata service for the instance's attested document for nonce.
func attested(ctx context.Context, metadata, nonce string) (string, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, attestation.DocumentURL(metadata, nonce), nil)
	if err != nil {
		return "", err
	}
	req.Header.Set("Metadata", "true")
	resp, err := (&http.Client{Timeout: 30 * time.Second}).Do(req)
	if err != nil {
		return "", fmt.Errorf("attested document: %w", err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if err != nil {
		return "", err
	}
	if resp.StatusCode != http.StatusOK {
		return "", fmt.Errorf("attested document: HTTP %d: %s", resp.StatusCode, strings.TrimSpace(string(body)))
	}
	var doc attestation.Document
	if err := json.Unmarshal(body, &doc); err != nil || doc.Signature == "" {
		return "", fmt.Errorf("attested document: not a signed document: %s", body)
	}
	return string(body), nil
}
