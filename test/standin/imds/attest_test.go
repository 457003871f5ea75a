package imds

import (
	"crypto/x509"
	"encoding/base64"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/clusterforge/clusterforge/components/attestation"
)

// A machine's attested document, as the stand-in signs it, passes the verifier joining nodes
// meet, with the issuer fetched from the address the signer's certificate names, and names the
// machine and the nonce bound to a key; each altered part is refused.
func TestAttestedDocumentVerifies(t *testing.T) {
	dir := t.TempDir()
	if err := WriteSigningChain(dir); err != nil {
		t.Fatal(err)
	}
	signer, err := ReadSigner(dir)
	if err != nil {
		t.Fatal(err)
	}
	const id = "/subscriptions/00000000-0000-0000-0000-00000000c0de/resourceGroups/cf-dev/providers/Microsoft.Compute/virtualMachineScaleSets/cf-dev-cpu/virtualMachines/3"
	s := &Server{Signer: signer, Machines: map[string]InstanceMetadata{"10.0.2.7": {Name: "cf-dev-cpu000003", ResourceID: id, VMID: "5c4f1c52-8f0e-4b3e-9d5c-2b1f6f0a0003"}}}
	get := func(path string) (int, []byte) {
		req := httptest.NewRequest(http.MethodGet, "http://169.254.169.254"+path, nil)
		req.RemoteAddr = "10.0.2.7:41000"
		req.Header.Set("Metadata", "true")
		w := httptest.NewRecorder()
		s.ServeHTTP(w, req)
		body, _ := io.ReadAll(w.Result().Body)
		return w.Code, body
	}
	_, nonce, err := attestation.NewKey()
	if err != nil {
		t.Fatal(err)
	}
	code, body := get(attestation.DocumentURL("", nonce))
	if code != http.StatusOK {
		t.Fatalf("attested document: HTTP %d %s", code, body)
	}
	var doc attestation.Document
	if err := json.Unmarshal(body, &doc); err != nil {
		t.Fatal(err)
	}
	rootPEM, err := os.ReadFile(filepath.Join(dir, RootFile))
	if err != nil {
		t.Fatal(err)
	}
	roots := x509.NewCertPool()
	roots.AppendCertsFromPEM(rootPEM)
	fetched := 0
	issuers := attestation.FetchIssuers(&http.Client{Transport: roundTrip(func(r *http.Request) (*http.Response, error) {
		fetched++
		if r.URL.Path != IssuerPath {
			t.Errorf("issuer URL %s", r.URL)
		}
		w := httptest.NewRecorder()
		s.ServeHTTP(w, r)
		return w.Result(), nil
	})})
	now := time.Now()
	v := attestation.Verifier{Roots: roots, Issuers: issuers, Now: func() time.Time { return now }, MaxAge: attestation.MaxAge}
	p, err := v.Verify(doc)
	if err != nil {
		t.Fatal(err)
	}
	if p.Nonce != nonce || p.VMID != s.Machines["10.0.2.7"].VMID || p.SubscriptionID != "00000000-0000-0000-0000-00000000c0de" || fetched != 1 {
		t.Errorf("payload %+v (issuer fetched %d times), want nonce %s and the machine's vmId and subscription", p, fetched, nonce)
	}

	otherDir := t.TempDir()
	if err := WriteSigningChain(otherDir); err != nil {
		t.Fatal(err)
	}
	otherRoot, _ := os.ReadFile(filepath.Join(otherDir, RootFile))
	others := x509.NewCertPool()
	others.AppendCertsFromPEM(otherRoot)
	der, _ := base64.StdEncoding.DecodeString(doc.Signature)
	tampered := append([]byte{}, der...)
	if i := strings.Index(string(tampered), nonce); i >= 0 {
		tampered[i] ^= 1
	} else {
		t.Fatal("the nonce is not in the message")
	}
	for name, tc := range map[string]struct {
		v   attestation.Verifier
		doc attestation.Document
	}{
		"another root":     {attestation.Verifier{Roots: others, Issuers: issuers, Now: v.Now, MaxAge: v.MaxAge}, doc},
		"no issuer fetch":  {attestation.Verifier{Roots: roots, Now: v.Now, MaxAge: v.MaxAge}, doc},
		"too old":          {attestation.Verifier{Roots: roots, Issuers: issuers, Now: func() time.Time { return now.Add(attestation.MaxAge + time.Minute) }, MaxAge: v.MaxAge}, doc},
		"from the future":  {attestation.Verifier{Roots: roots, Issuers: issuers, Now: func() time.Time { return now.Add(-2 * time.Minute) }, MaxAge: v.MaxAge}, doc},
		"altered content":  {v, attestation.Document{Encoding: attestation.Encoding, Signature: base64.StdEncoding.EncodeToString(tampered)}},
		"another encoding": {v, attestation.Document{Encoding: "jwt", Signature: doc.Signature}},
	} {
		if p, err := tc.v.Verify(tc.doc); err == nil {
			t.Errorf("%s: verified %+v", name, p)
		} else {
			t.Logf("%s: %v", name, err)
		}
	}
	// A certificate is not trusted until its chain is: its issuer is fetched only from Azure's PKI hosts.
	for _, url := range []string{"http://169.254.169.254" + IssuerPath, "https://www.microsoft.com" + IssuerPath, "http://www.microsoft.com:8080" + IssuerPath} {
		if _, err := issuers(url); err == nil || fetched != 1 {
			t.Errorf("issuer at %s: fetched (%v)", url, err)
		}
	}
	if code, body := get(attestation.DocumentURL("", "12345")); code != http.StatusBadRequest {
		t.Errorf("a 5-digit nonce: HTTP %d %s, want 400", code, body)
	}
}

type roundTrip func(*http.Request) (*http.Response, error)

func (f roundTrip) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }
