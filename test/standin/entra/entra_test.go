package entra

import (
	"context"
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/rsa"
	"crypto/sha256"
	"crypto/x509"
	"encoding/base64"
	"encoding/json"
	"encoding/pem"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/clusterforge/clusterforge/components/azurecloud"
	"github.com/clusterforge/clusterforge/components/pki"
	"github.com/clusterforge/clusterforge/test/standin"
)

const (
	tenant           = "22222222-2222-2222-2222-222222222222"
	clientID         = "11111111-1111-1111-1111-000000000001"
	issuer           = "https://oidcexample.blob.core.windows.net/oidc"
	subject          = "system:serviceaccount:kube-system:clusterforge-ops"
	exchangeAudience = "api://AzureADTokenExchange"
)

// The real azidentity workload identity credential gets a token for a federated subject's token
// and Entra's refusal for everything Entra refuses. The tokens are signed here as kube-apiserver
// signs them; that the apiserver's own documents match pki.IssuerDocuments is checked on a real
// apiserver (test/e2e/controlplane).
func TestWorkloadIdentityExchange(t *testing.T) {
	key, err := rsa.GenerateKey(rand.Reader, pki.ServiceAccountKeyBits)
	if err != nil {
		t.Fatal(err)
	}
	der, _ := x509.MarshalPKIXPublicKey(key.Public())
	docs := t.TempDir()
	if err := WriteIssuerDocuments(docs, issuer, string(pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: der}))); err != nil {
		t.Fatal(err)
	}
	var exchanges []Exchange
	s := &Server{Tenant: tenant, Now: time.Now, IssuerDocument: DocumentsFrom(issuer, docs),
		Federations: []Federation{{ClientID: clientID, Issuer: issuer, Subject: subject, Audience: exchangeAudience}},
		Record:      func(e Exchange) { exchanges = append(exchanges, e) }}
	srv := httptest.NewTLSServer(s)
	defer srv.Close()

	kid := func() string { sum := sha256.Sum256(der); return base64.RawURLEncoding.EncodeToString(sum[:]) }()
	now := time.Now()
	claims := map[string]any{"iss": issuer, "sub": subject, "aud": []string{exchangeAudience}, "exp": now.Add(time.Hour).Unix(), "nbf": now.Unix(), "iat": now.Unix()}
	with := func(k string, v any) map[string]any {
		c := map[string]any{}
		for ck, cv := range claims {
			c[ck] = cv
		}
		c[k] = v
		return c
	}
	ecKey, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	for _, tc := range []struct {
		name, token, client, refusal string
	}{
		{"federated subject", signRS256(t, key, kid, claims), clientID, ""},
		{"another service account", signRS256(t, key, kid, with("sub", "system:serviceaccount:team-a:default")), clientID, "AADSTS70021"},
		{"the right subject for another identity", signRS256(t, key, kid, claims), "11111111-1111-1111-1111-000000000002", "AADSTS70021"},
		{"the apiservers' audience", signRS256(t, key, kid, with("aud", []string{"https://kubernetes.default.svc.cluster.local"})), clientID, "AADSTS70021"},
		{"expired", signRS256(t, key, kid, with("exp", now.Add(-time.Minute).Unix())), clientID, "AADSTS700024"},
		{"another issuer", signRS256(t, key, kid, with("iss", "https://kubernetes.default.svc.cluster.local")), clientID, "AADSTS700211"},
		{"ES256", signES256(t, ecKey, kid, claims), clientID, "AADSTS5002738"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			token, err := SignIn(ctx, srv.Client(), srv.URL+"/", tenant, tc.client, tc.token)
			switch {
			case tc.refusal == "" && err != nil:
				t.Errorf("no token: %v", err)
			case tc.refusal == "":
				checkAccessToken(t, srv, token.Token, tc.client)
			case tc.refusal != "" && (err == nil || !strings.Contains(err.Error(), tc.refusal)):
				t.Errorf("got %v, want Entra's %s", err, tc.refusal)
			}
		})
	}
	if len(exchanges) == 0 || exchanges[0].Refused != "" || exchanges[0].Subject != subject {
		t.Errorf("exchanges recorded %+v, want the federated subject's first", exchanges)
	}
}

func signRS256(t *testing.T, key *rsa.PrivateKey, kid string, claims map[string]any) string {
	input := jwsInput(t, "RS256", kid, claims)
	sum := sha256.Sum256([]byte(input))
	sig, err := rsa.SignPKCS1v15(rand.Reader, key, crypto.SHA256, sum[:])
	if err != nil {
		t.Fatal(err)
	}
	return input + "." + base64.RawURLEncoding.EncodeToString(sig)
}

func signES256(t *testing.T, key *ecdsa.PrivateKey, kid string, claims map[string]any) string {
	input := jwsInput(t, "ES256", kid, claims)
	sum := sha256.Sum256([]byte(input))
	sig, err := ecdsa.SignASN1(rand.Reader, key, sum[:])
	if err != nil {
		t.Fatal(err)
	}
	return input + "." + base64.RawURLEncoding.EncodeToString(sig)
}

func jwsInput(t *testing.T, alg, kid string, claims map[string]any) string {
	header, _ := json.Marshal(map[string]string{"alg": alg, "kid": kid, "typ": "JWT"})
	payload, err := json.Marshal(claims)
	if err != nil {
		t.Fatal(err)
	}
	return base64.RawURLEncoding.EncodeToString(header) + "." + base64.RawURLEncoding.EncodeToString(payload)
}

// checkAccessToken verifies an access token as Resource Manager does: with a key from the key set
// the tenant's OpenID configuration names, for Resource Manager's audience and the client.
func checkAccessToken(t *testing.T, srv *httptest.Server, token, client string) {
	t.Helper()
	get := func(url string, v any) []byte {
		resp, err := srv.Client().Get(url)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		data, err := io.ReadAll(resp.Body)
		if err != nil || resp.StatusCode != http.StatusOK {
			t.Fatalf("GET %s: %d %v", url, resp.StatusCode, err)
		}
		if v != nil {
			if err := json.Unmarshal(data, v); err != nil {
				t.Fatal(err)
			}
		}
		return data
	}
	var config struct {
		JWKSURI string `json:"jwks_uri"`
	}
	get(srv.URL+"/"+tenant+"/v2.0/.well-known/openid-configuration", &config)
	keys := get(config.JWKSURI, nil)
	var claims AccessClaims
	if err := standin.ParseRS256(token, &claims, func(kid string) (*rsa.PublicKey, error) { return standin.KeyFromSet(keys, kid) }); err != nil {
		t.Fatalf("the access token does not verify with the tenant's published key: %v", err)
	}
	if want := azurecloud.Public.TokenAudience; claims.Audience != want || claims.AppID != client || claims.Tenant != tenant {
		t.Errorf("access token claims %+v, want audience %s, app %s, tenant %s", claims, want, client, tenant)
	}
}
