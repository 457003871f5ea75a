package entra

import (
	"encoding/json"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/clusterforge/clusterforge/components/azurecloud"
	"github.com/clusterforge/clusterforge/test/standin"
)

// autoscalerFixture is what the real cluster-autoscaler exchanged with the booted cluster's
// stand-in as it signed in (instance discovery, the tenant's configuration, the token), with the
// federated credentials the stand-in held; docs/testing.md says how to record it again.
const autoscalerFixture = "testdata/cluster-autoscaler"

// The stand-in answers the real autoscaler's recorded sign-in as it did, a fresh assertion of the
// same issuer, subject and audience standing in for the redacted one.
func TestReplaysTheRealAutoscalersSignIn(t *testing.T) {
	exchanges, err := standin.Lines[standin.Exchange](filepath.Join(autoscalerFixture, "wire.jsonl"))
	if err != nil || len(exchanges) == 0 {
		t.Fatalf("the fixture: %d exchanges, %v", len(exchanges), err)
	}
	data, err := os.ReadFile(filepath.Join(autoscalerFixture, "federations.json"))
	if err != nil {
		t.Fatal(err)
	}
	var federations []Federation
	if err := json.Unmarshal(data, &federations); err != nil {
		t.Fatal(err)
	}
	issuer := federations[0].Issuer
	key, kid, docs := newIssuer(t, issuer)
	s := &Server{Tenant: tenantOf(t, exchanges), Federations: federations, IssuerDocument: DocumentsFrom(issuer, docs), Now: time.Now, Record: func(Exchange) {}}
	client := serveAsEntra(t, s)
	standin.Replay(t, exchanges, func(ex standin.Exchange, uri string) (*http.Response, error) {
		var body *strings.Reader
		if ex.Form != nil {
			form := ex.Form
			if form.Get("client_assertion") == standin.Redacted {
				i := slices.IndexFunc(federations, func(f Federation) bool { return f.ClientID == form.Get("client_id") })
				if i < 0 {
					t.Fatalf("no federated credential of client %s", form.Get("client_id"))
				}
				f, now := federations[i], time.Now()
				form.Set("client_assertion", signRS256(t, key, kid, map[string]any{"iss": f.Issuer, "sub": f.Subject, "aud": []string{f.Audience},
					"exp": now.Add(time.Hour).Unix(), "nbf": now.Unix(), "iat": now.Unix()}))
			}
			body = strings.NewReader(form.Encode())
		} else {
			body = strings.NewReader("")
		}
		req, err := http.NewRequest(ex.Method, strings.TrimSuffix(azurecloud.Public.AuthorityHost, "/")+uri, body)
		if err != nil {
			return nil, err
		}
		req.Header.Set("User-Agent", ex.UserAgent)
		if ex.Form != nil {
			req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
		}
		return client.Do(req)
	})
}

// tenantOf is the tenant the recorded requests name in their paths.
func tenantOf(t *testing.T, exchanges []standin.Exchange) string {
	for _, ex := range exchanges {
		if first, _, _ := strings.Cut(strings.TrimPrefix(ex.URL, "/"), "/"); first != "common" {
			return first
		}
	}
	t.Fatal("no request names a tenant")
	return ""
}
