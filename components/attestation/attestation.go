// Package attestation reads Azure's attested data: the instance metadata service's document,
// signed by Azure, that names the VM asking for it (its vmId and subscription) and echoes a nonce
// the VM chose. A joining node binds the nonce to the key of its certificate request, so the
// document vouches for that request and no other.
package attestation

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/sha256"
	"crypto/x509"
	"encoding/base64"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"maps"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/smallstep/pkcs7"
)

// The metadata service's endpoint and version of the attested document, and its encoding.
const (
	Path       = "/metadata/attested/document"
	APIVersion = "2020-09-01"
	Encoding   = "pkcs7"
)

// DocumentURL is where a machine asks the metadata service at base for its document with nonce.
func DocumentURL(base, nonce string) string {
	return base + Path + "?api-version=" + APIVersion + "&nonce=" + nonce
}

// MaxAge is how old a document may be when its request is judged: a node asks for it just before
// it makes the request, waits this long for the verdict, and asks again on a refusal.
const MaxAge = 10 * time.Minute

// SignerDomain is the name Azure's signing certificate is issued for, itself or a subdomain
// ("Azure Instance Metadata Service: attested data", learn.microsoft.com).
const SignerDomain = "metadata.azure.com"

// TimeLayout is the document's timestamps' format ("11/28/18 00:16:17 -0000").
const TimeLayout = "01/02/06 15:04:05 -0700"

// Document is the metadata service's answer: a PKCS#7 signed message, base64 encoded.
type Document struct {
	Encoding  string `json:"encoding"`
	Signature string `json:"signature"`
}

// Payload is the signed content, the fields read here.
type Payload struct {
	Nonce          string `json:"nonce"`
	VMID           string `json:"vmId"`
	SubscriptionID string `json:"subscriptionId"`
	TimeStamp      struct {
		CreatedOn string `json:"createdOn"`
		ExpiresOn string `json:"expiresOn"`
	} `json:"timeStamp"`
}

// NewKey is a new P-256 key for a node's certificate request, and the nonce (Nonce) of the
// attested document that vouches for it.
func NewKey() (*ecdsa.PrivateKey, string, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, "", err
	}
	nonce, err := Nonce(key.Public())
	return key, nonce, err
}

// Nonce is the nonce a request for key asks for: the metadata service takes ten digits, here the
// first 64 bits of the SHA-256 of the key's PKIX encoding, modulo 10^10.
func Nonce(key crypto.PublicKey) (string, error) {
	der, err := x509.MarshalPKIXPublicKey(key)
	if err != nil {
		return "", err
	}
	sum := sha256.Sum256(der)
	return fmt.Sprintf("%010d", binary.BigEndian.Uint64(sum[:8])%10_000_000_000), nil
}

// Verifier checks documents: the signature, the signer's certificate chained to Roots at Now
// for SignerDomain, and the document's own validity window.
type Verifier struct {
	Roots *x509.CertPool
	// Issuers fetches a certificate's issuer from its Authority Information Access URL: Azure's
	// message carries the signer's certificate alone. Nil uses only the message's certificates.
	Issuers func(url string) (*x509.Certificate, error)
	Now     func() time.Time
	// MaxAge refuses a document created longer ago than this.
	MaxAge time.Duration
}

// parse reads a document's signed message without checking it.
func parse(doc Document) (*pkcs7.PKCS7, error) {
	if doc.Encoding != Encoding {
		return nil, fmt.Errorf("attestation: encoding %q, want %s", doc.Encoding, Encoding)
	}
	der, err := base64.StdEncoding.DecodeString(doc.Signature)
	if err != nil {
		return nil, fmt.Errorf("attestation: signature: %w", err)
	}
	p7, err := pkcs7.Parse(der)
	if err != nil {
		return nil, fmt.Errorf("attestation: %w", err)
	}
	return p7, nil
}

// ContentKey names what a document says, not how it is written: the SHA-256 of its signed
// content, the same for every re-encoding of one document (its JSON, base64 or PKCS#7 wrapping).
// It checks nothing: Verify does.
func ContentKey(doc Document) (string, error) {
	p7, err := parse(doc)
	if err != nil {
		return "", err
	}
	sum := sha256.Sum256(p7.Content)
	return hex.EncodeToString(sum[:]), nil
}

// Verify returns the payload of a document that passes every check.
func (v Verifier) Verify(doc Document) (Payload, error) {
	p7, err := parse(doc)
	if err != nil {
		return Payload{}, err
	}
	if err := p7.Verify(); err != nil { // the signature over the content; the chain is checked below
		return Payload{}, fmt.Errorf("attestation: %w", err)
	}
	signer := p7.GetOnlySigner()
	if signer == nil {
		return Payload{}, errors.New("attestation: not one signer")
	}
	if !slices.ContainsFunc(signer.DNSNames, func(n string) bool { return n == SignerDomain || strings.HasSuffix(n, "."+SignerDomain) }) {
		return Payload{}, fmt.Errorf("attestation: signed for %q, not %s", signer.DNSNames, SignerDomain)
	}
	now := v.Now()
	intermediates := x509.NewCertPool()
	for _, c := range p7.Certificates {
		intermediates.AddCert(c)
	}
	if v.Issuers != nil {
		urls := signer.IssuingCertificateURL
		if len(urls) > maxIssuerURLs { // the certificate is not trusted yet: fetch little for it
			urls = urls[:maxIssuerURLs]
		}
		for _, url := range urls {
			if issuer, err := v.Issuers(url); err == nil {
				intermediates.AddCert(issuer)
			}
		}
	}
	if _, err := signer.Verify(x509.VerifyOptions{Roots: v.Roots, Intermediates: intermediates, CurrentTime: now,
		KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageAny}}); err != nil {
		return Payload{}, fmt.Errorf("attestation: signer %s: %w", signer.Subject, err)
	}
	var p Payload
	if err := json.Unmarshal(p7.Content, &p); err != nil {
		return Payload{}, fmt.Errorf("attestation: content: %w", err)
	}
	created, err := time.Parse(TimeLayout, p.TimeStamp.CreatedOn)
	if err != nil {
		return Payload{}, fmt.Errorf("attestation: createdOn: %w", err)
	}
	expires, err := time.Parse(TimeLayout, p.TimeStamp.ExpiresOn)
	if err != nil {
		return Payload{}, fmt.Errorf("attestation: expiresOn: %w", err)
	}
	switch {
	case now.Before(created.Add(-time.Minute)): // a minute of clock skew
		return Payload{}, fmt.Errorf("attestation: created %s, in the future", p.TimeStamp.CreatedOn)
	case now.Sub(created) > v.MaxAge:
		return Payload{}, fmt.Errorf("attestation: created %s, more than %s ago", p.TimeStamp.CreatedOn, v.MaxAge)
	case now.After(expires):
		return Payload{}, fmt.Errorf("attestation: expired %s", p.TimeStamp.ExpiresOn)
	}
	return p, nil
}

// maxIssuerURLs is how many issuer addresses of one certificate are fetched.
const maxIssuerURLs = 2

// IssuerHosts are the hosts Azure's signing certificates name their issuers at (Microsoft's and
// DigiCert's PKI): FetchIssuers asks no other, since the certificate naming them is not trusted
// until its chain is built.
var IssuerHosts = []string{"www.microsoft.com", "cacerts.digicert.com"}

// FetchIssuers fetches issuers over plain HTTP (as Authority Information Access names them; the
// chain's verification is what trusts them) from IssuerHosts only. Anyone with the join token
// sends documents whose certificates name what they like on those hosts, so: fetches of different
// addresses run side by side (a slow one holds up only its own callers), an address is fetched
// once however many ask at the same time, an issuer fetched is kept (up to maxIssuers) and never
// pushed out by failures, and a failure is remembered for ten minutes (up to maxFailures).
func FetchIssuers(client *http.Client) func(url string) (*x509.Certificate, error) {
	var mu sync.Mutex
	issuers := map[string]*x509.Certificate{}
	failures := map[string]time.Time{}
	fetching := map[string]chan struct{}{}
	return func(raw string) (*x509.Certificate, error) {
		u, err := url.Parse(raw)
		// A query or fragment would make one address many, each a fetch and a failure remembered.
		if err != nil || u.Scheme != "http" || !slices.Contains(IssuerHosts, u.Hostname()) || u.Port() != "" ||
			u.RawQuery != "" || u.ForceQuery || u.Fragment != "" || u.User != nil {
			return nil, fmt.Errorf("attestation: issuer %q is not a plain address at %v", raw, IssuerHosts)
		}
		for {
			mu.Lock()
			if cert, ok := issuers[raw]; ok {
				mu.Unlock()
				return cert, nil
			}
			if at, ok := failures[raw]; ok && time.Since(at) < failureMemory {
				mu.Unlock()
				return nil, fmt.Errorf("attestation: issuer %s failed at %s", raw, at.Format(time.RFC3339))
			}
			if wait, ok := fetching[raw]; ok {
				mu.Unlock()
				<-wait
				continue
			}
			done := make(chan struct{})
			fetching[raw] = done
			mu.Unlock()

			cert, err := fetchIssuer(client, raw)
			mu.Lock()
			delete(fetching, raw)
			close(done)
			switch {
			case err == nil && len(issuers) < maxIssuers:
				issuers[raw] = cert
			case err != nil:
				if len(failures) >= maxFailures {
					maps.DeleteFunc(failures, func(_ string, at time.Time) bool { return time.Since(at) >= failureMemory })
				}
				if len(failures) < maxFailures {
					failures[raw] = time.Now()
				}
			}
			mu.Unlock()
			return cert, err
		}
	}
}

// How many issuers and failures FetchIssuers keeps, and how long a failure.
const (
	maxIssuers    = 256
	maxFailures   = 4096
	failureMemory = 10 * time.Minute
)

func fetchIssuer(client *http.Client, url string) (*x509.Certificate, error) {
	resp, err := client.Get(url)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("attestation: issuer %s: HTTP %d", url, resp.StatusCode)
	}
	data, err := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
	if err != nil {
		return nil, err
	}
	if block, _ := pem.Decode(data); block != nil {
		data = block.Bytes
	}
	c, err := x509.ParseCertificate(data)
	if err != nil {
		return nil, fmt.Errorf("attestation: issuer %s: %w", url, err)
	}
	return c, nil
}
