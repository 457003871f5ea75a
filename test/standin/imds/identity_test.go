package imds

import (
	"context"
	"crypto/rsa"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore/policy"
	"github.com/Azure/azure-sdk-for-go/sdk/azidentity"

	"github.com/clusterforge/clusterforge/components/azurecloud"
	"github.com/clusterforge/clusterforge/test/standin"
	"github.com/clusterforge/clusterforge/test/standin/entra"
)

// The SDK's managed-identity credential, as the CSR approver builds it, gets a machine's identity's
// token from the stand-in, signed with Entra's stand-in's key; a machine with none, or with two
// and no client id named, is refused as Azure refuses it.
func TestManagedIdentityTokens(t *testing.T) {
	e := &entra.Server{Tenant: "22222222-2222-2222-2222-222222222222", Now: time.Now}
	key, err := e.TokenKey()
	if err != nil {
		t.Fatal(err)
	}
	s := &Server{Entra: e, Machines: map[string]InstanceMetadata{
		"10.0.0.4": {Name: "apiserver000000", Identities: []string{"client-apiserver"}},
		"10.0.0.5": {Name: "two", Identities: []string{"client-a", "client-b"}},
		"10.0.0.6": {Name: "none"},
	}}
	from := func(addr string) policy.Transporter {
		return transport(func(r *http.Request) (*http.Response, error) {
			r.RemoteAddr = addr + ":40000"
			w := httptest.NewRecorder()
			s.ServeHTTP(w, r)
			return w.Result(), nil
		})
	}
	token := func(addr string, id azidentity.ManagedIDKind) (string, error) {
		cred, err := azidentity.NewManagedIdentityCredential(&azidentity.ManagedIdentityCredentialOptions{ID: id,
			ClientOptions: policy.ClientOptions{Transport: from(addr), Retry: policy.RetryOptions{MaxRetries: -1}}})
		if err != nil {
			return "", err
		}
		tok, err := cred.GetToken(context.Background(), policy.TokenRequestOptions{Scopes: []string{azurecloud.Public.Scope()}})
		return tok.Token, err
	}
	// Refusals first: the SDK keeps the tokens it got for the process, by identity.
	for addr, id := range map[string]azidentity.ManagedIDKind{"10.0.0.5": nil, "10.0.0.6": nil, "10.0.0.4": azidentity.ClientID("client-a")} {
		if _, err := token(addr, id); err == nil {
			t.Errorf("%s with %v: a token, want a refusal", addr, id)
		}
	}
	tok, err := token("10.0.0.4", nil)
	if err != nil {
		t.Fatal(err)
	}
	var claims entra.AccessClaims
	if err := standin.ParseRS256(tok, &claims, func(string) (*rsa.PublicKey, error) { return key, nil }); err != nil {
		t.Fatal(err)
	}
	if claims.AppID != "client-apiserver" || claims.Audience != azurecloud.Public.TokenAudience || claims.Tenant != e.Tenant {
		t.Errorf("claims %+v, want the machine's identity for Resource Manager's audience in the tenant", claims)
	}
	if _, err := token("10.0.0.5", azidentity.ClientID("client-b")); err != nil {
		t.Errorf("the second of two identities, named: %v", err)
	}
}

type transport func(*http.Request) (*http.Response, error)

func (f transport) Do(r *http.Request) (*http.Response, error) { return f(r) }
