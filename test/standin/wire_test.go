package standin

import (
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// What a stand-in records holds no credential or secret, wherever the client or the stand-in put
// it: a form's assertion and secret, a query's signature, a request's custom data deep in a model,
// an answer's tokens however it is indented.
func TestRecordedWireHoldsNoSecret(t *testing.T) {
	const secret = "s3cr3t"
	file := filepath.Join(t.TempDir(), "wire.jsonl")
	h := RecordWire(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write([]byte("{\n  \"access_token\": \"" + secret + "\",\n  \"nested\": {\"id_token\": \"" + secret + "\"},\n  \"code\": \"ok\"\n}"))
	}), file, "client")
	for _, req := range []*http.Request{
		httptest.NewRequest(http.MethodPost, "/token?sig="+secret, strings.NewReader("client_assertion="+secret+"&client_secret="+secret+"&grant_type=x")),
		httptest.NewRequest(http.MethodPut, "/vmss", strings.NewReader(`{"properties":{"virtualMachineProfile":{"osProfile":{"customData":"`+secret+`","adminPassword":"`+secret+`"}}}}`)),
	} {
		if req.Method == http.MethodPost {
			req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
		}
		req.Header.Set("User-Agent", "client/1")
		h.ServeHTTP(httptest.NewRecorder(), req)
	}
	data, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(string(data), secret) || strings.Count(string(data), Redacted) != 9 {
		t.Errorf("recorded %s: want the secret nowhere, REDACTED in its 9 places", data)
	}
	if !strings.Contains(string(data), `"code":"ok"`) {
		t.Errorf("recorded %s: an answer's own \"code\" is no credential", data)
	}
}
