package standin

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"regexp"
	"strings"
	"testing"
	"time"
)

// Exchange is one request a stand-in answered and its answer, as a client saw them on the wire:
// what a real client's run leaves behind, to replay against the stand-in later (a fixture).
// Credentials are left out: the Authorization header, client assertions and access tokens.
type Exchange struct {
	Time      time.Time `json:"time"`
	UserAgent string    `json:"userAgent,omitempty"`
	Method    string    `json:"method"`
	// URL is the request's path and query.
	URL string `json:"url"`
	// IfMatch is the request's If-Match header: the ETag a write was made over.
	IfMatch      string          `json:"ifMatch,omitempty"`
	Form         url.Values      `json:"form,omitempty"`
	Body         json.RawMessage `json:"body,omitempty"`
	Status       int             `json:"status"`
	Headers      http.Header     `json:"headers,omitempty"`
	ResponseBody json.RawMessage `json:"responseBody,omitempty"`
}

// Redacted stands where a credential was.
const Redacted = "REDACTED"

// wireHeaders are the response headers a client acts on.
var wireHeaders = []string{"Location", "Azure-AsyncOperation", "Retry-After", "WWW-Authenticate", "Content-Type"}

// Where credentials and secrets sit: form fields and query parameters (an assertion, a code, a
// SAS signature), and JSON keys (tokens, a VM's custom data or protected settings).
var (
	secretValues = map[string]bool{"client_assertion": true, "client_secret": true, "assertion": true, "refresh_token": true, "code": true, "password": true, "sig": true}
	secretJSON   = map[string]bool{"access_token": true, "id_token": true, "refresh_token": true, "client_secret": true, "password": true, "adminPassword": true,
		"customData": true, "protectedSettings": true}
)

// redactJSON is a JSON document with every secret key's value Redacted, compact; nil when it is
// no JSON.
func redactJSON(data []byte) []byte {
	var v any
	if len(bytes.TrimSpace(data)) == 0 || json.Unmarshal(data, &v) != nil {
		return nil
	}
	var walk func(any) any
	walk = func(v any) any {
		switch t := v.(type) {
		case map[string]any:
			for k, x := range t {
				if secretJSON[k] {
					t[k] = Redacted
				} else {
					t[k] = walk(x)
				}
			}
		case []any:
			for i, x := range t {
				t[i] = walk(x)
			}
		}
		return v
	}
	out, err := json.Marshal(walk(v))
	if err != nil {
		return nil
	}
	return out
}

// redactValues is a form or query with every secret key's values Redacted.
func redactValues(v url.Values) url.Values {
	for k := range v {
		if secretValues[k] {
			v[k] = []string{Redacted}
		}
	}
	return v
}

// RecordWire wraps h: each exchange of a client whose User-Agent holds agent goes to file, one
// JSON line each; no file, h alone.
func RecordWire(h http.Handler, file, agent string) http.Handler {
	if file == "" {
		return h
	}
	record := Recorder[Exchange](file, "")
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !strings.Contains(r.UserAgent(), agent) {
			h.ServeHTTP(w, r)
			return
		}
		u := *r.URL
		u.RawQuery = redactValues(u.Query()).Encode()
		ex := Exchange{Time: time.Now().UTC(), UserAgent: r.UserAgent(), Method: r.Method, URL: u.RequestURI(), IfMatch: r.Header.Get("If-Match")}
		body, _ := io.ReadAll(r.Body)
		r.Body = io.NopCloser(bytes.NewReader(body))
		if form, err := url.ParseQuery(string(body)); err == nil && strings.HasPrefix(r.Header.Get("Content-Type"), "application/x-www-form-urlencoded") {
			ex.Form = redactValues(form)
		} else {
			ex.Body = redactJSON(body)
		}
		rec := &capture{ResponseWriter: w, status: http.StatusOK}
		h.ServeHTTP(rec, r)
		ex.Status, ex.Headers = rec.status, http.Header{}
		for _, name := range wireHeaders {
			if v := w.Header().Get(name); v != "" {
				ex.Headers.Set(name, v)
			}
		}
		ex.ResponseBody = redactJSON(rec.body.Bytes())
		record(ex)
	})
}

type capture struct {
	http.ResponseWriter
	status int
	body   bytes.Buffer
}

func (c *capture) WriteHeader(status int) {
	c.status = status
	c.ResponseWriter.WriteHeader(status)
}

func (c *capture) Write(p []byte) (int, error) {
	c.body.Write(p)
	return c.ResponseWriter.Write(p)
}

// Replay sends each recorded exchange again through send, in order, and reports where an answer
// differs from the recorded one in what a client reads: its status, the headers it acts on being
// there, and every field of the recorded body (a new field passes; a missing or changed one fails).
// A URL an earlier answer gave (an operation to poll) is replaced by the replay's own; UUIDs
// compare as equal, since the stand-ins make new ones, and so do times within a second.
func Replay(t testing.TB, exchanges []Exchange, send func(ex Exchange, requestURI string) (*http.Response, error)) {
	t.Helper()
	given := map[string]string{} // recorded URL path and query → the replay's
	for i, ex := range exchanges {
		uri := ex.URL
		if mapped, ok := given[uri]; ok {
			uri = mapped
		}
		resp, err := send(ex, uri)
		if err != nil {
			t.Fatalf("exchange %d (%s %s): %v", i, ex.Method, ex.URL, err)
		}
		body, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		if err != nil {
			t.Fatal(err)
		}
		where := fmt.Sprintf("exchange %d (%s %s, recorded %s)", i, ex.Method, ex.URL, ex.Time.Format(time.RFC3339))
		if resp.StatusCode != ex.Status {
			t.Errorf("%s: status %d, recorded %d: %s", where, resp.StatusCode, ex.Status, body)
			continue
		}
		for name, values := range ex.Headers {
			got := resp.Header.Get(name)
			if got == "" {
				t.Errorf("%s: no %s header, recorded %q", where, name, values[0])
				continue
			}
			if recorded, err := url.Parse(values[0]); err == nil && recorded.IsAbs() {
				if replayed, err := url.Parse(got); err == nil {
					given[recorded.RequestURI()] = replayed.RequestURI()
				}
			}
		}
		if len(ex.ResponseBody) == 0 {
			continue
		}
		var want, gotBody any
		if err := json.Unmarshal(anyUUID.ReplaceAll(ex.ResponseBody, []byte(uuidMark)), &want); err != nil {
			t.Fatal(err)
		}
		redacted := redactJSON(body)
		if err := json.Unmarshal(anyUUID.ReplaceAll(redacted, []byte(uuidMark)), &gotBody); err != nil {
			t.Errorf("%s: the answer is no JSON: %v: %s", where, err, body)
			continue
		}
		for _, diff := range contained(want, gotBody, "") {
			t.Errorf("%s: %s", where, diff)
		}
	}
}

var anyUUID = regexp.MustCompile(`[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}`)

const uuidMark = "UUID"

// contained lists where want is not within got: each of want's object keys in got with a value
// containing want's, arrays of one length element by element, anything else equal.
func contained(want, got any, path string) []string {
	switch w := want.(type) {
	case map[string]any:
		g, ok := got.(map[string]any)
		if !ok {
			return []string{fmt.Sprintf("%s: %v, recorded an object", path, got)}
		}
		var diffs []string
		for k, v := range w {
			gv, ok := g[k]
			if !ok {
				diffs = append(diffs, fmt.Sprintf("%s.%s: missing, recorded %v", path, k, v))
				continue
			}
			diffs = append(diffs, contained(v, gv, path+"."+k)...)
		}
		return diffs
	case []any:
		g, ok := got.([]any)
		if !ok || len(g) != len(w) {
			return []string{fmt.Sprintf("%s: %v, recorded %v", path, got, want)}
		}
		var diffs []string
		for i := range w {
			diffs = append(diffs, contained(w[i], g[i], fmt.Sprintf("%s[%d]", path, i))...)
		}
		return diffs
	default:
		if want != got && !sameTime(want, got) {
			return []string{fmt.Sprintf("%s: %v, recorded %v", path, got, want)}
		}
		return nil
	}
}

// sameTime says whether two values are timestamps within a second of each other: a replay's
// clock reads the recorded request times, not the instants the stand-in read its own.
func sameTime(a, b any) bool {
	as, aok := a.(string)
	bs, bok := b.(string)
	if !aok || !bok {
		return false
	}
	at, aerr := time.Parse(time.RFC3339Nano, as)
	bt, berr := time.Parse(time.RFC3339Nano, bs)
	return aerr == nil && berr == nil && at.Sub(bt).Abs() < time.Second
}
