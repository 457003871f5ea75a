// Package nodejoin gets a new worker its kubelet's client certificate, proving which Azure
// instance it is: it asks the instance metadata service for the instance's attested document,
// with the nonce bound to the key of its certificate request, and sends both in the request with
// the join token. The apiservers' CSR approver checks them (components/csrapprover); the kubelet
// then starts with the certificate and renews it itself.
package nodejoin

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"time"

	certv1 "k8s.io/api/certificates/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"

	"github.com/clusterforge/clusterforge/components/attestation"
	"github.com/clusterforge/clusterforge/components/pki"
	"github.com/clusterforge/clusterforge/components/wellknown"
)

// Config is what one join needs.
type Config struct {
	// NodeName is the name the node registers, its instance's computer name.
	NodeName string
	// InstanceID is the instance's resource ID, from the metadata service.
	InstanceID string
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

// joined says whether the kubelet's kubeconfig and a certificate valid for another hour are there.
func joined(cfg Config) bool {
	if _, err := os.Stat(cfg.Kubeconfig); err != nil {
		return false
	}
	data, err := os.ReadFile(cfg.ClientCert)
	if err != nil {
		return false
	}
	for block, rest := pem.Decode(data); block != nil; block, rest = pem.Decode(rest) {
		if block.Type == "CERTIFICATE" {
			cert, err := x509.ParseCertificate(block.Bytes)
			return err == nil && time.Until(cert.NotAfter) > time.Hour
		}
	}
	return false
}

// join makes one attempt: a new key, its attested document, the request, and the wait.
func join(ctx context.Context, cfg Config) error {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return err
	}
	request, err := x509.CreateCertificateRequest(rand.Reader, &x509.CertificateRequest{
		Subject: pkix.Name{CommonName: "system:node:" + cfg.NodeName, Organization: []string{pki.NodesGroup}}}, key)
	if err != nil {
		return err
	}
	nonce, err := attestation.Nonce(key.Public())
	if err != nil {
		return err
	}
	doc, err := attested(ctx, cfg.Metadata, nonce)
	if err != nil {
		return err
	}
	restCfg, err := clientcmd.BuildConfigFromFlags("", cfg.BootstrapKubeconfig)
	if err != nil {
		return err
	}
	client, err := kubernetes.NewForConfig(restCfg)
	if err != nil {
		return err
	}
	csr, err := client.CertificatesV1().CertificateSigningRequests().Create(ctx, &certv1.CertificateSigningRequest{
		ObjectMeta: metav1.ObjectMeta{GenerateName: "node-join-" + cfg.NodeName + "-", Annotations: map[string]string{
			wellknown.AttestedDocumentAnnotation: doc, wellknown.InstanceAnnotation: cfg.InstanceID}},
		Spec: certv1.CertificateSigningRequestSpec{
			Request:    pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE REQUEST", Bytes: request}),
			SignerName: certv1.KubeAPIServerClientKubeletSignerName,
			Usages:     []certv1.KeyUsage{certv1.UsageDigitalSignature, certv1.UsageClientAuth},
		},
	}, metav1.CreateOptions{})
	if err != nil {
		return fmt.Errorf("certificate request: %w", err)
	}
	cfg.Logf("asked for a client certificate as %s (request %s)", cfg.NodeName, csr.Name)
	cert, err := issued(ctx, client, csr.Name)
	if err != nil {
		return err
	}
	keyDER, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		return err
	}
	if err := writeCurrent(cfg.ClientCert, append(cert, pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: keyDER})...)); err != nil {
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

// attested asks the metadata service for the instance's attested document for nonce.
func attested(ctx context.Context, metadata, nonce string) (string, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, metadata+attestation.Path+"?api-version="+attestation.APIVersion+"&nonce="+nonce, nil)
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

// issued waits up to 10 minutes for the request's verdict: the certificate, or the approver's
// reason for denying it.
func issued(ctx context.Context, client kubernetes.Interface, name string) ([]byte, error) {
	deadline := time.Now().Add(10 * time.Minute)
	for {
		csr, err := client.CertificatesV1().CertificateSigningRequests().Get(ctx, name, metav1.GetOptions{})
		if err == nil {
			for _, c := range csr.Status.Conditions {
				if c.Type == certv1.CertificateDenied || c.Type == certv1.CertificateFailed {
					return nil, fmt.Errorf("request %s %s: %s: %s", name, strings.ToLower(string(c.Type)), c.Reason, c.Message)
				}
			}
			if len(csr.Status.Certificate) > 0 {
				return csr.Status.Certificate, nil
			}
		}
		if time.Now().After(deadline) {
			return nil, fmt.Errorf("request %s: no certificate within 10 minutes (last read: %v)", name, err)
		}
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(2 * time.Second):
		}
	}
}

// writeCurrent writes a dated pair beside current and points current at it.
func writeCurrent(current string, pair []byte) error {
	dir := filepath.Dir(current)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return err
	}
	dated := filepath.Join(dir, "kubelet-client-"+time.Now().UTC().Format("2006-01-02-15-04-05")+".pem")
	if err := os.WriteFile(dated, pair, 0o600); err != nil {
		return err
	}
	link := current + ".tmp"
	_ = os.Remove(link)
	if err := os.Symlink(dated, link); err != nil {
		return err
	}
	return os.Rename(link, current)
}
