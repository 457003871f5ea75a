package imds

import (
	"encoding/json"
	"net/http"
	"slices"
	"strconv"
	"strings"

	"github.com/clusterforge/clusterforge/components/azurecloud"
	"github.com/clusterforge/clusterforge/test/standin/entra"
)

// IdentityPath is the metadata service's managed-identity token endpoint.
const IdentityPath = "/metadata/identity/oauth2/token"

// identityToken answers a machine's request for a token of one of its user-assigned identities,
// issued by Entra ID's stand-in as Azure's service has Entra issue it: the one identity when the
// machine has one, else the one client_id names (Azure's refusals otherwise).
func (s *Server) identityToken(w http.ResponseWriter, r *http.Request, m InstanceMetadata) {
	fail := func(code int, errCode, msg string) {
		w.Header().Set("Content-Type", "application/json; charset=utf-8")
		w.WriteHeader(code)
		_ = json.NewEncoder(w).Encode(map[string]string{"error": errCode, "error_description": msg})
	}
	q := r.URL.Query()
	resource := strings.TrimSuffix(q.Get("resource"), azurecloud.ScopeSuffix)
	client := q.Get("client_id")
	switch {
	case resource == "":
		fail(http.StatusBadRequest, "invalid_request", "Required query variable 'resource' is missing")
		return
	case len(m.Identities) == 0:
		fail(http.StatusBadRequest, "invalid_request", "Identity not found")
		return
	case client == "" && len(m.Identities) > 1:
		fail(http.StatusBadRequest, "invalid_request", "Multiple user assigned identities exist, please specify the clientId / resourceId of the identity in the token request")
		return
	case client == "":
		client = m.Identities[0]
	case !slices.Contains(m.Identities, client):
		fail(http.StatusBadRequest, "invalid_request", "Identity not found")
		return
	}
	token, err := s.Entra.AccessToken(client, resource)
	if err != nil {
		fail(http.StatusInternalServerError, "unknown_error", err.Error())
		return
	}
	now := s.Entra.Now()
	expires := now.Add(entra.TokenLifetime)
	w.Header().Set("Content-Type", "application/json; charset=utf-8")
	_ = json.NewEncoder(w).Encode(map[string]string{
		"access_token": token, "client_id": client, "resource": resource, "token_type": "Bearer",
		"expires_in": strconv.Itoa(int(entra.TokenLifetime.Seconds())), "expires_on": strconv.FormatInt(expires.Unix(), 10),
		"not_before": strconv.FormatInt(now.Unix(), 10),
	})
}
