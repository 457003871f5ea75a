package attestation

import (
	"bytes"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"fmt"
	"io"
	"math/big"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

type roundTrip func(*http.Request) (*http.Response, error)

func (f roundTrip) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

// Documents from anyone with the join token name issuers of their choosing on Azure's PKI hosts: a
// slow address holds up only its own callers, an address is fetched once for many callers, and
// failures never push out an issuer fetched.
func TestFetchIssuersHoldsUpOnlyTheSlowAddress(t *testing.T) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	der, err := x509.CreateCertificate(rand.Reader, &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "issuer"},
		NotBefore: time.Now(), NotAfter: time.Now().Add(time.Hour)}, &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "issuer"}}, key.Public(), key)
	if err != nil {
		t.Fatal(err)
	}
	release := make(chan struct{})
	var goodFetches, fetches atomic.Int32
	fetch := FetchIssuers(&http.Client{Transport: roundTrip(func(r *http.Request) (*http.Response, error) {
		fetches.Add(1)
		status, body := http.StatusNotFound, []byte("no")
		switch r.URL.Path {
		case "/slow":
			<-release
		case "/good":
			goodFetches.Add(1)
			time.Sleep(50 * time.Millisecond) // long enough for the other callers to arrive
			status, body = http.StatusOK, der
		}
		return &http.Response{StatusCode: status, Body: io.NopCloser(bytes.NewReader(body)), Request: r}, nil
	})})
	const host = "http://cacerts.digicert.com"
	slow := make(chan error, 1)
	go func() { _, err := fetch(host + "/slow"); slow <- err }()
	time.Sleep(20 * time.Millisecond)

	var wg sync.WaitGroup
	start := time.Now()
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if c, err := fetch(host + "/good"); err != nil || c == nil {
				t.Errorf("the issuer: %v", err)
			}
		}()
	}
	wg.Wait()
	if waited := time.Since(start); waited > 2*time.Second || goodFetches.Load() != 1 {
		t.Errorf("8 callers of one issuer, beside a slow address: %s and %d fetches, want at once and one", waited, goodFetches.Load())
	}
	for i := range maxFailures + 10 {
		if _, err := fetch(fmt.Sprintf("%s/missing-%d", host, i)); err == nil || !strings.Contains(err.Error(), "404") {
			t.Fatalf("a missing issuer: %v", err)
		}
	}
	before := fetches.Load()
	if _, err := fetch(host + "/missing-0"); err == nil || fetches.Load() != before {
		t.Errorf("a failure fetched again at once: %v", err)
	}
	if c, err := fetch(host + "/good"); err != nil || c == nil || goodFetches.Load() != 1 {
		t.Errorf("the issuer after %d failures: %v, fetched %d times; want it kept", maxFailures+10, err, goodFetches.Load())
	}
	for _, variant := range []string{host + "/good?x=1", host + "/good?", host + "/good#x", "http://u@cacerts.digicert.com/good"} {
		if _, err := fetch(variant); err == nil || !strings.Contains(err.Error(), "not a plain address") {
			t.Errorf("issuer %s: %v, want refused before any fetch", variant, err)
		}
	}
	close(release)
	if err := <-slow; err == nil {
		t.Error("the slow address answered 404 and was taken")
	}
}
