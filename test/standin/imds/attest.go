package imds

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/base64"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"math/big"
	"os"
	"path/filepath"
	"regexp"
	"time"

	azarm "github.com/Azure/azure-sdk-for-go/sdk/azcore/arm"
	"github.com/smallstep/pkcs7"

	"github.com/clusterforge/clusterforge/components/attestation"
)

// IssuerHost and IssuerPath are where the signing certificate's Authority Information Access
// names its issuer, on Microsoft's PKI host as Azure's does; the stand-in serves it at any host,
// and a machine that fetches it resolves IssuerHost to the stand-in.
const IssuerPath = "/pkiops/certs/attested-data-stand-in-issuing-ca.crt"

// IssuerHost is the first of Azure's PKI hosts.
var IssuerHost = attestation.IssuerHosts[0]

// The files of a signing chain: a root, an intermediate and the signer, as Azure's documents
// chain from a public root through an issuing CA to metadata.azure.com.
const (
	RootFile   = "root.crt"
	issuerFile = "issuer.crt"
	signerFile = "signer.crt"
	keyFile    = "signer.key"
)

// Signer signs attested documents.
type Signer struct {
	Cert   *x509.Certificate
	Key    crypto.Signer
	Issuer *x509.Certificate
	// Lifetime is how long a document is valid (Azure's: six hours).
	Lifetime time.Duration
}

// WriteSigningChain makes a new chain in dir; RootFile is the anchor a verifier trusts.
func WriteSigningChain(dir string) error {
	now := time.Now()
	issue := func(tmpl *x509.Certificate, parent *x509.Certificate, parentKey crypto.Signer) (*x509.Certificate, crypto.Signer, error) {
		key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
		if err != nil {
			return nil, nil, err
		}
		tmpl.SerialNumber, tmpl.NotBefore, tmpl.NotAfter = big.NewInt(now.UnixNano()), now.Add(-time.Hour), now.Add(30*24*time.Hour)
		if parent == nil {
			parent, parentKey = tmpl, key
		}
		der, err := x509.CreateCertificate(rand.Reader, tmpl, parent, key.Public(), parentKey)
		if err != nil {
			return nil, nil, err
		}
		cert, err := x509.ParseCertificate(der)
		return cert, key, err
	}
	ca := func(name string) *x509.Certificate {
		return &x509.Certificate{Subject: pkix.Name{CommonName: name}, IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign}
	}
	root, rootKey, err := issue(ca("attested data stand-in root"), nil, nil)
	if err != nil {
		return err
	}
	issuer, issuerKey, err := issue(ca("attested data stand-in issuing CA"), root, rootKey)
	if err != nil {
		return err
	}
	signer, signerKey, err := issue(&x509.Certificate{Subject: pkix.Name{CommonName: attestation.SignerDomain}, DNSNames: []string{attestation.SignerDomain},
		KeyUsage: x509.KeyUsageDigitalSignature, IssuingCertificateURL: []string{"http://" + IssuerHost + IssuerPath}}, issuer, issuerKey)
	if err != nil {
		return err
	}
	keyDER, err := x509.MarshalPKCS8PrivateKey(signerKey)
	if err != nil {
		return err
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	for name, block := range map[string]*pem.Block{RootFile: {Type: "CERTIFICATE", Bytes: root.Raw}, issuerFile: {Type: "CERTIFICATE", Bytes: issuer.Raw},
		signerFile: {Type: "CERTIFICATE", Bytes: signer.Raw}, keyFile: {Type: "PRIVATE KEY", Bytes: keyDER}} {
		if err := os.WriteFile(filepath.Join(dir, name), pem.EncodeToMemory(block), 0o600); err != nil {
			return err
		}
	}
	return nil
}

// ReadSigner reads the chain WriteSigningChain made.
func ReadSigner(dir string) (*Signer, error) {
	read := func(name string) ([]byte, error) {
		data, err := os.ReadFile(filepath.Join(dir, name))
		if err != nil {
			return nil, err
		}
		block, _ := pem.Decode(data)
		if block == nil {
			return nil, fmt.Errorf("%s: not PEM", name)
		}
		return block.Bytes, nil
	}
	s := &Signer{Lifetime: 6 * time.Hour}
	for name, parse := range map[string]func([]byte) error{
		signerFile: func(b []byte) (err error) { s.Cert, err = x509.ParseCertificate(b); return },
		issuerFile: func(b []byte) (err error) { s.Issuer, err = x509.ParseCertificate(b); return },
		keyFile: func(b []byte) error {
			k, err := x509.ParsePKCS8PrivateKey(b)
			if signer, ok := k.(crypto.Signer); ok && err == nil {
				s.Key = signer
			}
			return err
		},
	} {
		b, err := read(name)
		if err != nil {
			return nil, err
		}
		if err := parse(b); err != nil {
			return nil, fmt.Errorf("%s: %w", name, err)
		}
	}
	return s, nil
}

// nonceFormat is what the metadata service takes: ten digits.
var nonceFormat = regexp.MustCompile(`^[0-9]{10}$`)

// errNonce is the service's refusal of a nonce it does not take.
var errNonce = errors.New("Bad request. The nonce must be a 10-digit string")

// Document signs a machine's attested document for nonce (none: the current time, as Azure does),
// carrying the signer's certificate alone, as Azure's does.
func (s *Signer) Document(m InstanceMetadata, nonce string, now time.Time) (attestation.Document, error) {
	if nonce == "" {
		nonce = now.UTC().Format("20060102-150405")
	} else if !nonceFormat.MatchString(nonce) {
		return attestation.Document{}, errNonce
	}
	payload := map[string]any{
		"licenseType": "", "nonce": nonce, "plan": map[string]string{"name": "", "product": "", "publisher": ""},
		"sku": "", "subscriptionId": m.subscription(), "vmId": m.VMID,
		"timeStamp": map[string]string{"createdOn": now.UTC().Format(attestation.TimeLayout), "expiresOn": now.Add(s.Lifetime).UTC().Format(attestation.TimeLayout)},
	}
	content, err := json.Marshal(payload)
	if err != nil {
		return attestation.Document{}, err
	}
	sd, err := pkcs7.NewSignedData(content)
	if err != nil {
		return attestation.Document{}, err
	}
	if err := sd.AddSigner(s.Cert, s.Key, pkcs7.SignerInfoConfig{}); err != nil {
		return attestation.Document{}, err
	}
	der, err := sd.Finish()
	if err != nil {
		return attestation.Document{}, err
	}
	return attestation.Document{Encoding: attestation.Encoding, Signature: base64.StdEncoding.EncodeToString(der)}, nil
}

// subscription is the subscription of the machine's resource ID.
func (m InstanceMetadata) subscription() string {
	if id, err := azarm.ParseResourceID(m.ResourceID); err == nil {
		return id.SubscriptionID
	}
	return ""
}

// Reencoded writes an attested document otherwise, saying the same (its JSON indented, its base64
// broken into lines): a copier's way past a check on the document's bytes.
func Reencoded(document string) (string, error) {
	var doc attestation.Document
	if err := json.Unmarshal([]byte(document), &doc); err != nil {
		return "", err
	}
	if len(doc.Signature) > 64 {
		doc.Signature = doc.Signature[:64] + "\n" + doc.Signature[64:]
	}
	out, err := json.MarshalIndent(doc, "", "  ")
	return string(out), err
}
