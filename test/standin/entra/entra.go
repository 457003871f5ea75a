// Package entra stands in for Microsoft Entra ID's token service in a workload identity exchange
// (deviation "Entra ID"): a workload's Azure SDK, reaching it under Entra's public host name, posts
// its service account's token as a client assertion and gets an access token only if the token
// passes Entra's checks against a federated credential: RS256 only, a key from the issuer's
// published key set, the issuer, subject and audience the credential names, and not expired.
package entra

import (
	"context"
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"encoding/json"
	"encoding/pem"
	"errors"
	"flag"
	"fmt"
	"log"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/clusterforge/clusterforge/test/standin"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore"
	"github.com/Azure/azure-sdk-for-go/sdk/azcore/cloud"
	"github.com/Azure/azure-sdk-for-go/sdk/azcore/policy"
	"github.com/Azure/azure-sdk-for-go/sdk/azidentity"

	"github.com/clusterforge/clusterforge/components/azurecloud"
	"github.com/clusterforge/clusterforge/components/pki"
)

// TokenPath is the token endpoint under the authority host and tenant; TokenPathV1 the v1
// endpoint's, which takes a resource instead of a scope (ADAL's clients).
const (
	TokenPath   = "/oauth2/v2.0/token"
	TokenPathV1 = "/oauth2/token"
)

// InstanceDiscoveryPath is where MSAL asks which authority hosts are one cloud's.
const InstanceDiscoveryPath = "/common/discovery/instance"

// Federation is a federated identity credential: the client id of the identity it belongs to,
// and the issuer, subject and audience a token must carry to stand for it.
type Federation struct {
	ClientID string `json:"clientId"`
	Issuer   string `json:"issuer"`
	Subject  string `json:"subject"`
	Audience string `json:"audience"`
}

// Exchange is one token request's outcome, as the stand-in records it.
type Exchange struct {
	Time     time.Time `json:"time"`
	ClientID string    `json:"clientId"`
	Subject  string    `json:"subject,omitempty"`
	Scope    string    `json:"scope"`
	// Refused is Entra's error description ("AADSTS…: …"); empty when a token was issued.
	Refused string `json:"refused,omitempty"`
}

// Server is the token service of one tenant.
type Server struct {
	Tenant      string
	Federations []Federation
	// IssuerDocument returns a document of an issuer by URL (its discovery document, then the key
	// set it names), as Entra fetches them.
	IssuerDocument func(url string) ([]byte, error)
	// Record is told every exchange.
	Record func(Exchange)
	Now    func() time.Time
	// SigningKey signs the access tokens, and the tenant's key set publishes its public half;
	// one is made at first use when nil.
	SigningKey *rsa.PrivateKey
	keyOnce    sync.Once
	keyErr     error
}

// TokenKey is the public half of the key that signs the access tokens.
func (s *Server) TokenKey() (*rsa.PublicKey, error) {
	s.keyOnce.Do(func() {
		if s.SigningKey == nil {
			s.SigningKey, s.keyErr = rsa.GenerateKey(rand.Reader, 2048)
		}
	})
	if s.keyErr != nil {
		return nil, s.keyErr
	}
	return &s.SigningKey.PublicKey, nil
}

// AccessClaims are an access token's claims, as Entra's v1 tokens for Resource Manager carry them;
// the stand-in names a workload's object by its client id.
type AccessClaims struct {
	Audience  string `json:"aud"`
	Issuer    string `json:"iss"`
	Tenant    string `json:"tid"`
	AppID     string `json:"appid"`
	ObjectID  string `json:"oid"`
	IssuedAt  int64  `json:"iat"`
	NotBefore int64  `json:"nbf"`
	Expiry    int64  `json:"exp"`
}

// TokenIssuer is the issuer of a tenant's access tokens.
func TokenIssuer(tenant string) string { return "https://sts.windows.net/" + tenant + "/" }

// KeysPath is the tenant's signing key set under the authority host.
func KeysPath(tenant string) string { return "/" + tenant + "/discovery/v2.0/keys" }

// TokenLifetime is an access token's, as Entra issues them by default.
const TokenLifetime = time.Hour

// AccessToken issues clientID's token for the resource a scope ending in /.default names.
func (s *Server) AccessToken(clientID, resource string) (string, error) {
	if _, err := s.TokenKey(); err != nil {
		return "", err
	}
	now := s.Now()
	return standin.SignRS256(s.SigningKey, AccessClaims{
		Audience: resource, Issuer: TokenIssuer(s.Tenant), Tenant: s.Tenant, AppID: clientID, ObjectID: clientID,
		IssuedAt: now.Unix(), NotBefore: now.Unix(), Expiry: now.Add(TokenLifetime).Unix(),
	})
}

// ServeHTTP answers instance discovery, the tenant's OpenID configuration and its token endpoints.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	base := "https://" + r.Host + "/" + s.Tenant
	switch {
	case r.Method == http.MethodGet && r.URL.Path == InstanceDiscoveryPath:
		s.instanceDiscovery(w, r)
	case r.Method == http.MethodGet && r.URL.Path == "/"+s.Tenant+"/v2.0/.well-known/openid-configuration":
		writeJSON(w, http.StatusOK, map[string]any{
			"token_endpoint": base + TokenPath, "authorization_endpoint": base + "/oauth2/v2.0/authorize",
			"issuer": base + "/v2.0", "jwks_uri": "https://" + r.Host + KeysPath(s.Tenant), "token_endpoint_auth_methods_supported": []string{"client_secret_post", "private_key_jwt"},
		})
	case r.Method == http.MethodPost && r.URL.Path == "/"+s.Tenant+TokenPath:
		s.token(w, r, false)
	case r.Method == http.MethodPost && r.URL.Path == "/"+s.Tenant+TokenPathV1:
		s.token(w, r, true)
	case r.Method == http.MethodGet && r.URL.Path == KeysPath(s.Tenant):
		key, err := s.TokenKey()
		var keys []byte
		if err == nil {
			keys, err = pki.KeySet(key)
		}
		if err != nil {
			writeJSON(w, http.StatusInternalServerError, map[string]any{"error": err.Error()})
			return
		}
		w.Header().Set("Content-Type", "application/json; charset=utf-8")
		_, _ = w.Write(keys)
	case strings.HasPrefix(r.URL.Path, "/"+s.Tenant+"/"):
		writeJSON(w, http.StatusNotFound, map[string]any{"error": "not_found"})
	default:
		writeError(w, http.StatusBadRequest, "invalid_tenant", 90002, "Tenant '"+strings.Split(strings.Trim(r.URL.Path, "/"), "/")[0]+"' not found.")
	}
}

// instanceDiscovery answers as Entra does for an authorization endpoint on the host it serves as
// (the public cloud's aliases), and refuses any other host.
func (s *Server) instanceDiscovery(w http.ResponseWriter, r *http.Request) {
	endpoint, err := url.Parse(r.URL.Query().Get("authorization_endpoint"))
	var tenant string
	if err == nil {
		tenant, _, _ = strings.Cut(strings.TrimPrefix(endpoint.Path, "/"), "/")
	}
	if err != nil || endpoint.Scheme != "https" || !strings.EqualFold(endpoint.Host, r.Host) || tenant == "" {
		writeError(w, http.StatusBadRequest, "invalid_instance", 50049, "Unknown or invalid instance.")
		return
	}
	writeJSON(w, http.StatusOK, map[string]any{
		"tenant_discovery_endpoint": "https://" + r.Host + "/" + tenant + "/v2.0/.well-known/openid-configuration", "api-version": "1.1",
		"metadata": []map[string]any{{"preferred_network": r.Host, "preferred_cache": r.Host, "aliases": []string{r.Host}}},
	})
}

// token answers a client-credentials request: v2's names the resource in a scope, v1's in resource.
func (s *Server) token(w http.ResponseWriter, r *http.Request, v1 bool) {
	if err := r.ParseForm(); err != nil {
		writeError(w, http.StatusBadRequest, "invalid_request", 900144, err.Error())
		return
	}
	ex := Exchange{Time: s.Now(), ClientID: r.PostForm.Get("client_id"), Scope: r.PostForm.Get("scope")}
	if v1 {
		ex.Scope = r.PostForm.Get("resource")
	}
	refuse := func(code string, aadsts int, msg string) {
		ex.Refused = fmt.Sprintf("AADSTS%d: %s", aadsts, msg)
		s.Record(ex)
		writeError(w, http.StatusBadRequest, code, aadsts, msg)
	}
	if r.PostForm.Get("grant_type") != "client_credentials" ||
		r.PostForm.Get("client_assertion_type") != "urn:ietf:params:oauth:client-assertion-type:jwt-bearer" {
		refuse("unsupported_grant_type", 70003, "only client credentials with a JWT bearer assertion are served here")
		return
	}
	claims, err := s.verify(r.PostForm.Get("client_assertion"))
	if err != nil {
		var e *aadError
		if errors.As(err, &e) {
			refuse("invalid_client", e.code, e.msg)
		} else {
			refuse("invalid_client", 50027, "Invalid JWT token. "+err.Error())
		}
		return
	}
	ex.Subject = claims.Subject
	if !slices.ContainsFunc(s.Federations, func(f Federation) bool {
		return f.ClientID == ex.ClientID && f.Issuer == claims.Issuer && f.Subject == claims.Subject && slices.Contains(claims.Audience, f.Audience)
	}) {
		refuse("invalid_client", 70021, fmt.Sprintf("No matching federated identity record found for presented assertion issuer '%s' with subject '%s' and audience '%s'.",
			claims.Issuer, claims.Subject, strings.Join(claims.Audience, ",")))
		return
	}
	resource := ex.Scope
	if !v1 {
		// MSAL adds "openid offline_access profile"; the resource is the scope ending in /.default.
		scopes := strings.Fields(ex.Scope)
		i := slices.IndexFunc(scopes, func(scope string) bool { return strings.HasSuffix(scope, azurecloud.ScopeSuffix) })
		if i < 0 {
			refuse("invalid_scope", 1002012, "The provided value for scope "+ex.Scope+" is not valid. Client credential flows must have a scope value with /.default suffixed to the resource identifier.")
			return
		}
		resource = strings.TrimSuffix(scopes[i], azurecloud.ScopeSuffix)
	} else if resource == "" {
		refuse("invalid_request", 900144, "The request body must contain the following parameter: 'resource'.")
		return
	}
	access, err := s.AccessToken(ex.ClientID, resource)
	if err != nil {
		writeJSON(w, http.StatusInternalServerError, map[string]any{"error": err.Error()})
		return
	}
	s.Record(ex)
	if v1 {
		// v1 writes its numbers as strings, and when the token expires.
		now := s.Now()
		writeJSON(w, http.StatusOK, map[string]any{"token_type": "Bearer", "expires_in": strconv.Itoa(int(TokenLifetime.Seconds())),
			"ext_expires_in": strconv.Itoa(int(TokenLifetime.Seconds())), "expires_on": strconv.FormatInt(now.Add(TokenLifetime).Unix(), 10),
			"not_before": strconv.FormatInt(now.Unix(), 10), "resource": resource, "access_token": access})
		return
	}
	writeJSON(w, http.StatusOK, map[string]any{"token_type": "Bearer", "expires_in": int(TokenLifetime.Seconds()), "ext_expires_in": int(TokenLifetime.Seconds()),
		"access_token": access})
}

type aadError struct {
	code int
	msg  string
}

func (e *aadError) Error() string { return fmt.Sprintf("AADSTS%d: %s", e.code, e.msg) }

// Claims are the assertion's claims Entra matches a federated credential against.
type Claims struct {
	Issuer    string   `json:"iss"`
	Subject   string   `json:"sub"`
	Audience  audience `json:"aud"`
	Expiry    int64    `json:"exp"`
	NotBefore int64    `json:"nbf"`
}

// audience is a JWT "aud": one string or several.
type audience []string

func (a *audience) UnmarshalJSON(b []byte) error {
	var one string
	if json.Unmarshal(b, &one) == nil {
		*a = []string{one}
		return nil
	}
	return json.Unmarshal(b, (*[]string)(a))
}

// verify checks the assertion's signature with the issuer's published key and its lifetime.
func (s *Server) verify(assertion string) (*Claims, error) {
	var claims Claims
	err := standin.ParseRS256(assertion, &claims, func(kid string) (*rsa.PublicKey, error) {
		key, err := s.issuerKey(claims.Issuer, kid)
		if err != nil {
			return nil, &aadError{700211, fmt.Sprintf("No matching federated identity record found for presented assertion issuer '%s': %v", claims.Issuer, err)}
		}
		return key, nil
	})
	switch {
	case errors.Is(err, standin.ErrNotRS256):
		return nil, &aadError{5002738, "Invalid JWT token. " + err.Error() + "."}
	case errors.Is(err, standin.ErrSignature):
		return nil, &aadError{5002730, "Invalid JWT token. " + err.Error() + "."}
	case err != nil:
		return nil, err
	}
	now := s.Now().Unix()
	if claims.Expiry <= now || claims.NotBefore > now+300 {
		return nil, &aadError{700024, "Client assertion is not within its valid time range."}
	}
	return &claims, nil
}

// issuerKey finds key id kid in the key set the issuer's discovery document names.
func (s *Server) issuerKey(issuer, kid string) (*rsa.PublicKey, error) {
	data, err := s.IssuerDocument(strings.TrimSuffix(issuer, "/") + "/.well-known/openid-configuration")
	if err != nil {
		return nil, err
	}
	var discovery struct {
		Issuer  string `json:"issuer"`
		JWKSURI string `json:"jwks_uri"`
	}
	if err := json.Unmarshal(data, &discovery); err != nil {
		return nil, err
	}
	if discovery.Issuer != issuer {
		return nil, fmt.Errorf("the discovery document names issuer %q", discovery.Issuer)
	}
	if data, err = s.IssuerDocument(discovery.JWKSURI); err != nil {
		return nil, err
	}
	return standin.KeyFromSet(data, kid)
}

func writeJSON(w http.ResponseWriter, code int, v any) {
	w.Header().Set("Content-Type", "application/json; charset=utf-8")
	w.WriteHeader(code)
	_ = json.NewEncoder(w).Encode(v)
}

// writeError is Entra's error body: an OAuth error, its description and the AADSTS code.
func writeError(w http.ResponseWriter, status int, code string, aadsts int, msg string) {
	writeJSON(w, status, map[string]any{"error": code, "error_description": fmt.Sprintf("AADSTS%d: %s", aadsts, msg), "error_codes": []int{aadsts}})
}

// DocumentsFrom serves an issuer's documents from dir, a copy of its public container: the
// documents under the issuer's URL, by their path below it.
func DocumentsFrom(issuer, dir string) func(string) ([]byte, error) {
	return func(url string) ([]byte, error) {
		rest, ok := strings.CutPrefix(url, strings.TrimSuffix(issuer, "/")+"/")
		if !ok || strings.Contains(rest, "..") {
			return nil, fmt.Errorf("%s is not under issuer %s", url, issuer)
		}
		return os.ReadFile(filepath.Join(dir, filepath.FromSlash(rest)))
	}
}

// WriteIssuerDocuments writes the issuer's documents for the service-account public key into dir
// as the Pulumi program publishes them: a copy of the public container, for DocumentsFrom.
func WriteIssuerDocuments(dir, issuer, publicKeyPEM string) error {
	discovery, keys, err := pki.IssuerDocuments(issuer, publicKeyPEM)
	if err != nil {
		return err
	}
	for path, data := range map[string][]byte{pki.IssuerDiscoveryPath: discovery, pki.IssuerKeysPath: keys} {
		file := filepath.Join(dir, filepath.FromSlash(path))
		if err := os.MkdirAll(filepath.Dir(file), 0o755); err != nil {
			return err
		}
		if err := os.WriteFile(file, data, 0o644); err != nil {
			return err
		}
	}
	return nil
}

// SignIn trades a service-account token for a Resource Manager token as the workloads do, through
// the Azure SDK's workload identity credential, at the Entra ID of authorityHost over client: with
// MSAL's instance discovery at Entra's public host, or without it for a host of its own (a
// stand-in on loopback), as clusterforge-ops goes without it on a private cloud.
func SignIn(ctx context.Context, client policy.Transporter, authorityHost, tenant, clientID, token string) (azcore.AccessToken, error) {
	file := filepath.Join(os.TempDir(), fmt.Sprintf("entra-assertion-%d", time.Now().UnixNano()))
	if err := os.WriteFile(file, []byte(token), 0o600); err != nil {
		return azcore.AccessToken{}, err
	}
	defer os.Remove(file)
	cred, err := azidentity.NewWorkloadIdentityCredential(&azidentity.WorkloadIdentityCredentialOptions{
		ClientID: clientID, TenantID: tenant, TokenFilePath: file, DisableInstanceDiscovery: authorityHost != azurecloud.Public.AuthorityHost,
		ClientOptions: policy.ClientOptions{Transport: client, Cloud: cloud.Configuration{ActiveDirectoryAuthorityHost: authorityHost}},
	})
	if err != nil {
		return azcore.AccessToken{}, err
	}
	return cred.GetToken(ctx, policy.TokenRequestOptions{Scopes: []string{azurecloud.Public.Scope()}})
}

// Main serves the stand-in: `entra --listen=… --cert=… --key=… --tenant=… --federations=…
// --issuer=… --issuer-documents=… --exchanges=…`.
func Main(args []string) error {
	fs := flag.NewFlagSet("entra", flag.ContinueOnError)
	listen := fs.String("listen", "", "host:port to serve HTTPS on")
	cert := fs.String("cert", "", "serving certificate (PEM)")
	key := fs.String("key", "", "serving key (PEM)")
	tenant := fs.String("tenant", "", "the tenant id")
	federations := fs.String("federations", "", "JSON file: the federated identity credentials ([]Federation)")
	issuer := fs.String("issuer", "", "the service-account issuer whose documents --issuer-documents holds")
	documents := fs.String("issuer-documents", "", "directory: the issuer's public container")
	exchanges := fs.String("exchanges", "", "file each exchange is appended to, one JSON line")
	signingKey := fs.String("signing-key", "", "the key that signs access tokens (RSA, PEM); Resource Manager's stand-in verifies with it")
	wire := fs.String("wire", "", "file each exchange is appended to, bodies and all, credentials redacted (standin.Exchange)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	data, err := os.ReadFile(*federations)
	if err != nil {
		return fmt.Errorf("entra: --federations: %w", err)
	}
	s := &Server{Tenant: *tenant, IssuerDocument: DocumentsFrom(*issuer, *documents), Now: time.Now}
	if s.SigningKey, err = ReadSigningKey(*signingKey); err != nil {
		return fmt.Errorf("entra: --signing-key: %w", err)
	}
	if err := json.Unmarshal(data, &s.Federations); err != nil {
		return fmt.Errorf("entra: %s: %w", *federations, err)
	}
	s.Record = standin.Recorder[Exchange](*exchanges, "entra")
	return standin.Serve(*listen, standin.RecordWire(s, *wire, ""), *cert, *key, func() {
		log.Printf("Entra ID token service of tenant %s, %d federated credentials, on https://%s", *tenant, len(s.Federations), *listen)
	})
}

// WriteSigningKey writes a new token signing key (RSA, PKCS #1 PEM) for ReadSigningKey.
func WriteSigningKey(file string) error {
	key, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		return err
	}
	return os.WriteFile(file, pem.EncodeToMemory(&pem.Block{Type: "RSA PRIVATE KEY", Bytes: x509.MarshalPKCS1PrivateKey(key)}), 0o600)
}

// ReadSigningKey reads a key WriteSigningKey wrote.
func ReadSigningKey(file string) (*rsa.PrivateKey, error) {
	data, err := os.ReadFile(file)
	if err != nil {
		return nil, err
	}
	block, _ := pem.Decode(data)
	if block == nil {
		return nil, errors.New("not PEM")
	}
	return x509.ParsePKCS1PrivateKey(block.Bytes)
}
