package arm

import (
	"context"
	"crypto/rsa"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore"
	azarm "github.com/Azure/azure-sdk-for-go/sdk/azcore/arm"
	"github.com/Azure/azure-sdk-for-go/sdk/azcore/policy"

	"github.com/clusterforge/clusterforge/components/azurecloud"
	"github.com/clusterforge/clusterforge/components/pki"
	"github.com/clusterforge/clusterforge/test/standin"
	"github.com/clusterforge/clusterforge/test/standin/entra"
)

// Local is a stand-in served on loopback for a test, with its own Entra ID stand-in issuing the
// tokens: the Azure SDK's clients reach it through Options and a principal's Credential.
type Local struct {
	Server *Server
	HTTP   *httptest.Server
	Entra  *entra.Server
}

// Serve serves s over TLS until the test ends, taking tokens of a tenant of its own.
func Serve(t testing.TB, s *Server, tenant string) *Local {
	t.Helper()
	l, err := Start(s, tenant)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(l.Close)
	return l
}

// Start serves s over TLS on loopback, taking tokens of a tenant of its own, until Close.
func Start(s *Server, tenant string) (*Local, error) {
	e := &entra.Server{Tenant: tenant, Now: time.Now}
	key, err := e.TokenKey()
	if err != nil {
		return nil, err
	}
	keys, err := pki.KeySet(key)
	if err != nil {
		return nil, err
	}
	s.Auth = &Authority{Tenant: tenant, AuthorityHost: azurecloud.Public.AuthorityHost,
		TokenKey: func(kid string) (*rsa.PublicKey, error) { return standin.KeyFromSet(keys, kid) }}
	return &Local{Server: s, HTTP: httptest.NewTLSServer(s), Entra: e}, nil
}

// Close stops serving.
func (l *Local) Close() { l.HTTP.Close() }

// Grant assigns principal the actions over scope; before the first request.
func (l *Local) Grant(principal, scope string, actions ...string) {
	l.Server.Auth.Assignments = append(l.Server.Auth.Assignments, Assignment{Principal: principal, Scope: scope, Actions: actions})
}

// GroupID is the resource group's resource ID.
func (l *Local) GroupID() string { return l.Server.groupID() }

// Cloud is the stand-in as a custom cloud; its clients need Transport.
func (l *Local) Cloud() azurecloud.Cloud {
	// AzureStackCloud: a cloud the environment file describes.
	return azurecloud.Cloud{Name: "AzureStackCloud", ResourceManagerEndpoint: l.HTTP.URL, AuthorityHost: azurecloud.Public.AuthorityHost, TokenAudience: azurecloud.Public.TokenAudience}
}

// Transport trusts the stand-in's serving certificate.
func (l *Local) Transport() policy.Transporter { return l.HTTP.Client() }

// Options point the SDK's Resource Manager clients at the stand-in, as a custom cloud.
func (l *Local) Options() *azarm.ClientOptions {
	return &azarm.ClientOptions{ClientOptions: policy.ClientOptions{Transport: l.Transport(), Cloud: l.Cloud().SDK()}}
}

// Credential is a principal's: Entra's stand-in's access tokens for the scope asked.
func (l *Local) Credential(principal string) azcore.TokenCredential {
	return Credential(l.Entra, principal)
}

// Credential is a principal's access tokens, as e issues them, for the scope asked.
func Credential(e *entra.Server, principal string) azcore.TokenCredential {
	return tokens{e, principal}
}

type tokens struct {
	entra  *entra.Server
	client string
}

func (c tokens) GetToken(_ context.Context, opts policy.TokenRequestOptions) (azcore.AccessToken, error) {
	tok, err := c.entra.AccessToken(c.client, strings.TrimSuffix(opts.Scopes[0], azurecloud.ScopeSuffix))
	return azcore.AccessToken{Token: tok, ExpiresOn: time.Now().Add(time.Hour)}, err
}
