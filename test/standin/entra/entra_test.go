package entra

import (
	"context"
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/rsa"
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"encoding/base64"
	"encoding/json"
	"encoding/pem"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
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
	key, kid, docs := newIssuer(t, issuer)
	var exchanges []Exchange
	s := &Server{Tenant: tenant, Now: time.Now, IssuerDocument: DocumentsFrom(issuer, docs),
		Federations: []Federation{{ClientID: clientID, Issuer: issuer, Subject: subject, Audience: exchangeAudience}},
		Record:      func(e Exchange) { exchanges = append(exchanges, e) }}
	client := serveAsEntra(t, s)

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
			token, err := SignIn(ctx, client, azurecloud.Public.AuthorityHost, tenant, tc.client, tc.token)
			switch {
			case tc.refusal == "" && err != nil:
				t.Errorf("no token: %v", err)
			case tc.refusal == "":
				checkAccessToken(t, client, token.Token, tc.client)
			case tc.refusal != "" && (err == nil || !strings.Contains(err.Error(), tc.refusal)):
				t.Errorf("got %v, want Entra's %s", err, tc.refusal)
			}
		})
	}
	// MSAL asks Entra's public host whether it knows a sign-in host: Entra knows its own alone.
	for host, want := range map[string]int{"login.microsoftonline.com": http.StatusOK, "login.contoso.example": http.StatusBadRequest} {
		resp, err := client.Get(azurecloud.Public.AuthorityHost + strings.TrimPrefix(InstanceDiscoveryPath, "/") + "?api-version=1.1&authorization_endpoint=" +
			url.QueryEscape("https://"+host+"/"+tenant+"/oauth2/v2.0/authorize"))
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != want || want != http.StatusOK && !strings.Contains(string(body), "AADSTS50049") {
			t.Errorf("instance discovery of %s: %d %s, want %d (AADSTS50049 when refused)", host, resp.StatusCode, body, want)
		}
	}
	// v1's endpoint, as ADAL's clients ask it (older cluster-autoscalers): the resource by name,
	// the numbers as strings.
	form := url.Values{"grant_type": {"client_credentials"}, "client_id": {clientID}, "resource": {azurecloud.Public.ResourceManagerEndpoint},
		"client_assertion_type": {"urn:ietf:params:oauth:client-assertion-type:jwt-bearer"}, "client_assertion": {signRS256(t, key, kid, claims)}}
	resp, err := client.PostForm(azurecloud.Public.AuthorityHost+tenant+TokenPathV1, form)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var v1 struct{ AccessToken, ExpiresIn, ExpiresOn, Resource string }
	if err := json.NewDecoder(resp.Body).Decode(&struct {
		AccessToken *string `json:"access_token"`
		ExpiresIn   *string `json:"expires_in"`
		ExpiresOn   *string `json:"expires_on"`
		Resource    *string `json:"resource"`
	}{&v1.AccessToken, &v1.ExpiresIn, &v1.ExpiresOn, &v1.Resource}); err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("v1 token: %d %v", resp.StatusCode, err)
	}
	if v1.ExpiresIn == "" || v1.ExpiresOn == "" || v1.Resource != azurecloud.Public.ResourceManagerEndpoint {
		t.Errorf("v1 token response %+v", v1)
	}
	var access AccessClaims
	if err := standin.ParseRS256(v1.AccessToken, &access, func(string) (*rsa.PublicKey, error) { return s.TokenKey() }); err != nil || access.Audience != azurecloud.Public.ResourceManagerEndpoint {
		t.Errorf("v1 access token %+v, %v; want the audience it asked for", access, err)
	}
	if len(exchanges) == 0 || exchanges[0].Refused != "" || exchanges[0].Subject != subject {
		t.Errorf("exchanges recorded %+v, want the federated subject's first", exchanges)
	}
}

// newIssuer is a service-account issuer's signing key, its key id and its published documents,
// as kube-apiserver and the Pulumi program make them.
func newIssuer(t *testing.T, issuer string) (key *rsa.PrivateKey, kid, docs string) {
	key, err := rsa.GenerateKey(rand.Reader, pki.ServiceAccountKeyBits)
	if err != nil {
		t.Fatal(err)
	}
	der, _ := x509.MarshalPKIXPublicKey(key.Public())
	sum := sha256.Sum256(der)
	docs = t.TempDir()
	if err := WriteIssuerDocuments(docs, issuer, string(pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: der}))); err != nil {
		t.Fatal(err)
	}
	return key, base64.RawURLEncoding.EncodeToString(sum[:]), docs
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

// serveAsEntra serves s over TLS as Entra's public host: the client returned dials it for every
// address and trusts its certificate, made for that host.
func serveAsEntra(t *testing.T, s *Server) *http.Client {
	certPEM, keyPEM, err := standin.SelfSigned(strings.TrimSuffix(strings.TrimPrefix(azurecloud.Public.AuthorityHost, "https://"), "/"))
	if err != nil {
		t.Fatal(err)
	}
	pair, err := tls.X509KeyPair([]byte(certPEM), []byte(keyPEM))
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewUnstartedServer(s)
	srv.TLS = &tls.Config{Certificates: []tls.Certificate{pair}}
	srv.StartTLS()
	t.Cleanup(srv.Close)
	roots := x509.NewCertPool()
	roots.AppendCertsFromPEM([]byte(certPEM))
	return &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: roots},
		DialContext: func(ctx context.Context, network, _ string) (net.Conn, error) {
			return (&net.Dialer{}).DialContext(ctx, network, srv.Listener.Addr().String())
		}}}
}

// checkAccessToken verifies an access token as Resource Manager does: with a key from the key set
// the tenant's OpenID configuration names, for Resource Manager's audience and the client.
func checkAccessToken(t *testing.T, c *http.Client, token, client string) {
	t.Helper()
	get := func(url string, v any) []byte {
		resp, err := c.Get(url)
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
	get(azurecloud.Public.AuthorityHost+tenant+"/v2.0/.well-known/openid-configuration", &config)
	keys := get(config.JWKSURI, nil)
	var claims AccessClaims
	if err := standin.ParseRS256(token, &claims, func(kid string) (*rsa.PublicKey, error) { return standin.KeyFromSet(keys, kid) }); err != nil {
		t.Fatalf("the access token does not verify with the tenant's published key: %v", err)
	}
	if want := azurecloud.Public.TokenAudience; claims.Audience != want || claims.AppID != client || claims.Tenant != tenant {
		t.Errorf("access token claims %+v, want audience %s, app %s, tenant %s", claims, want, client, tenant)
	}
}
