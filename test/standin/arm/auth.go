package arm

import (
	"crypto/rsa"
	"net/http"
	"slices"
	"strings"
	"time"

	"github.com/clusterforge/clusterforge/components/azurecloud"
	"github.com/clusterforge/clusterforge/test/standin"
	"github.com/clusterforge/clusterforge/test/standin/entra"
)

// Assignment is a role assignment: the actions a principal may perform over a scope and below it.
type Assignment struct {
	// Principal is the identity's client id (the stand-ins name an identity's object by it).
	Principal string
	Scope     string
	// Actions may hold "*" wildcards, as role definitions do.
	Actions []string
}

// Authority is how the stand-in knows its callers (set before it serves): Entra ID access tokens of one tenant, signed
// with a key of the tenant's key set, for Resource Manager's audience, and what each may do.
type Authority struct {
	Tenant        string
	AuthorityHost string
	// TokenKey returns the tenant's token signing key by key id.
	TokenKey    func(kid string) (*rsa.PublicKey, error)
	Assignments []Assignment
}

// Audiences Resource Manager takes tokens for: its token audience and its endpoint.
var Audiences = []string{azurecloud.Public.TokenAudience, azurecloud.Public.ResourceManagerEndpoint, azurecloud.Public.ResourceManagerEndpoint + "/"}

// clockSkew is how far a token's times may be off, as Azure allows.
const clockSkew = 5 * time.Minute

// authenticate returns the caller's client id, or Resource Manager's 401.
func (a *Authority) authenticate(r *http.Request, now time.Time) (string, *apiError) {
	token, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
	if !ok {
		return "", errorf(http.StatusUnauthorized, "AuthenticationFailed", "Authentication failed. The 'Authorization' header is missing.")
	}
	var claims entra.AccessClaims
	if err := standin.ParseRS256(token, &claims, a.TokenKey); err != nil {
		return "", errorf(http.StatusUnauthorized, "InvalidAuthenticationToken", "The access token is invalid: %v.", err)
	}
	switch {
	case claims.Issuer != entra.TokenIssuer(a.Tenant) || claims.Tenant != a.Tenant:
		return "", errorf(http.StatusUnauthorized, "InvalidAuthenticationTokenTenant", "The access token is from the wrong issuer '%s'. It must match the tenant '%s' associated with this subscription.", claims.Issuer, entra.TokenIssuer(a.Tenant))
	case !slices.Contains(Audiences, claims.Audience):
		return "", errorf(http.StatusUnauthorized, "InvalidAuthenticationTokenAudience", "The access token has been obtained for wrong audience or resource '%s'.", claims.Audience)
	case now.Add(-clockSkew).Unix() >= claims.Expiry:
		return "", errorf(http.StatusUnauthorized, "ExpiredAuthenticationToken", "The access token expiry UTC time is earlier than current UTC time.")
	case now.Add(clockSkew).Unix() < claims.NotBefore:
		return "", errorf(http.StatusUnauthorized, "InvalidAuthenticationToken", "The access token is not yet valid.")
	}
	return claims.AppID, nil
}

// allowed says whether an assignment of principal over scope or above it grants action.
func (a *Authority) allowed(principal, action, scope string) bool {
	return slices.ContainsFunc(a.Assignments, func(as Assignment) bool {
		return as.Principal == principal && within(scope, as.Scope) &&
			slices.ContainsFunc(as.Actions, func(pattern string) bool { return matches(pattern, action) })
	})
}

// within says whether scope is parent or below it; resource IDs are case-insensitive.
func within(scope, parent string) bool {
	s, p := strings.ToLower(scope), strings.ToLower(strings.TrimSuffix(parent, "/"))
	return s == p || strings.HasPrefix(s, p+"/")
}

// matches is a role definition's action pattern: "*" stands for any run of characters.
func matches(pattern, action string) bool {
	parts := strings.Split(strings.ToLower(pattern), "*")
	rest := strings.ToLower(action)
	if !strings.HasPrefix(rest, parts[0]) {
		return false
	}
	rest = rest[len(parts[0]):]
	for i, part := range parts[1:] {
		if i == len(parts)-2 {
			return strings.HasSuffix(rest, part)
		}
		j := strings.Index(rest, part)
		if j < 0 {
			return false
		}
		rest = rest[j+len(part):]
	}
	return rest == ""
}
