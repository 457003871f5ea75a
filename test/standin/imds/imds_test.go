package imds

import (
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/clusterforge/clusterforge/components/ops/maintenance"
)

// The metadata stand-in answers each machine about itself, in Azure's shapes, and refuses what
// Azure refuses; the identity unit's query is among the paths.
func TestIMDSAnswersEachMachineAboutItself(t *testing.T) {
	s := &Server{Machines: map[string]InstanceMetadata{
		"10.0.1.4": {Name: "cf-dev-etcd-main-0", Zone: "1", PrivateIP: "10.0.1.4", SubnetAddress: "10.0.1.0", SubnetPrefix: 24},
		"10.0.1.5": {Name: "cf-dev-etcd-main-1", Zone: "2", PrivateIP: "10.0.1.5", SubnetAddress: "10.0.1.0", SubnetPrefix: 24},
	}}
	get := func(from, path string, header bool) (int, string) {
		req := httptest.NewRequest(http.MethodGet, "http://169.254.169.254"+path, nil)
		req.RemoteAddr = from + ":41000"
		if header {
			req.Header.Set("Metadata", "true")
		}
		w := httptest.NewRecorder()
		s.ServeHTTP(w, req)
		body, _ := io.ReadAll(w.Result().Body)
		return w.Code, string(body)
	}
	for _, tc := range []struct {
		from, path string
		header     bool
		code       int
		body       string
	}{
		{"10.0.1.5", "/metadata/instance/network/interface/0/ipv4/ipAddress/0/privateIpAddress?api-version=2021-02-01&format=text", true, 200, "10.0.1.5"},
		{"10.0.1.4", "/metadata/instance/compute/name?api-version=2021-02-01&format=text", true, 200, "cf-dev-etcd-main-0"},
		{"10.0.1.5", "/metadata/instance/compute/zone?api-version=2021-02-01&format=text", true, 200, "2"},
		{"10.0.1.4", "/metadata/instance/network/interface/0/ipv4/subnet/0/prefix?api-version=2021-02-01&format=text", true, 200, "24"},
		{"10.0.1.4", "/metadata/instance?api-version=2021-02-01", true, 200, `"privateIpAddress":"10.0.1.4"`},
		{"10.0.1.4", "/metadata/instance/compute?api-version=2021-02-01&format=text", true, 200, "name\nosType"},
		{"10.0.1.4", "/metadata/instance/compute/name?api-version=2021-02-01&format=text", false, 400, "Required metadata header"},
		{"10.0.1.4", "/metadata/instance/compute/name?format=text", true, 400, "api-version"},
		{"10.0.1.9", "/metadata/instance/compute/name?api-version=2021-02-01&format=text", true, 404, "no machine"},
		{"10.0.1.4", "/metadata/instance/compute/nope?api-version=2021-02-01&format=text", true, 404, "Not found"},
	} {
		code, body := get(tc.from, tc.path, tc.header)
		if code != tc.code || !strings.Contains(body, tc.body) {
			t.Errorf("%s from %s: HTTP %d %q, want %d with %q", tc.path, tc.from, code, body, tc.code, tc.body)
		}
	}
}

// A machine a scale set's growth adds is answered as soon as the machines file names it, and one
// the file no longer names is not, however soon after the last write (same modification time).
func TestIMDSReadsTheMachinesFileAtEachRequest(t *testing.T) {
	file := filepath.Join(t.TempDir(), "imds.json")
	write := func(body string, mtime time.Time) {
		if err := os.WriteFile(file, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
		if err := os.Chtimes(file, mtime, mtime); err != nil {
			t.Fatal(err)
		}
	}
	name := func(s *Server, from string) string {
		req := httptest.NewRequest(http.MethodGet, "http://169.254.169.254/metadata/instance/compute/name?api-version=2021-02-01&format=text", nil)
		req.RemoteAddr = from + ":41000"
		req.Header.Set("Metadata", "true")
		w := httptest.NewRecorder()
		s.ServeHTTP(w, req)
		body, _ := io.ReadAll(w.Result().Body)
		return strings.TrimSpace(string(body))
	}
	start := time.Now().Add(-time.Minute)
	write(`{"10.1.0.4": {"name": "cf-dev-cpu000000"}}`, start)
	s := &Server{MachinesFile: file}
	if got := name(s, "10.1.0.4"); got != "cf-dev-cpu000000" {
		t.Fatalf("10.1.0.4 is %q", got)
	}
	write(`{"10.1.0.5": {"name": "cf-dev-cpu000001"}}`, start)
	if got := name(s, "10.1.0.5"); got != "cf-dev-cpu000001" {
		t.Errorf("a machine added to the file is %q", got)
	}
	if got := name(s, "10.1.0.4"); !strings.Contains(got, "no machine") {
		t.Errorf("a machine gone from the file is still answered: %q", got)
	}
}

// Scheduled events come from the drill's file, read at each request, each machine getting its own;
// the watcher's parser reads what the stand-in serves.
func TestIMDSServesEachMachineItsScheduledEvents(t *testing.T) {
	file := filepath.Join(t.TempDir(), "events.json")
	s := &Server{Machines: map[string]InstanceMetadata{"10.0.1.4": {Name: "a"}, "10.0.1.5": {Name: "b"}}, ScheduledEvents: eventsFromFile(file)}
	get := func(from string) maintenance.Document {
		req := httptest.NewRequest(http.MethodGet, "http://169.254.169.254"+maintenance.Path, nil)
		req.RemoteAddr, req.Header = from+":41000", http.Header{"Metadata": {"true"}}
		w := httptest.NewRecorder()
		s.ServeHTTP(w, req)
		if w.Code != http.StatusOK {
			t.Fatalf("HTTP %d: %s", w.Code, w.Body)
		}
		doc, err := maintenance.Parse(w.Result().Body)
		if err != nil {
			t.Fatal(err)
		}
		return doc
	}
	if doc := get("10.0.1.4"); len(doc.Events) != 0 {
		t.Fatalf("no file yet: %+v", doc)
	}
	events := `{"10.0.1.4": {"DocumentIncarnation": 2, "Events": [{"EventId": "e1", "EventType": "Reboot", "ResourceType": "VirtualMachine",
		"Resources": ["cf-dev-cpu_3"], "EventStatus": "Scheduled", "NotBefore": "Wed, 25 Nov 2026 18:00:00 GMT", "EventSource": "Platform"}]}}`
	if err := os.WriteFile(file, []byte(events), 0o644); err != nil {
		t.Fatal(err)
	}
	doc := get("10.0.1.4")
	if c := maintenance.ConditionFor(doc, "cf-dev-cpu_3", time.Date(2026, 11, 25, 17, 0, 0, 0, time.UTC)); c.Status != "True" || c.Reason != "Reboot" {
		t.Errorf("the planned reboot read back: %+v", c)
	}
	if doc := get("10.0.1.5"); len(doc.Events) != 0 {
		t.Errorf("another machine got %+v", doc)
	}

	post := func(from, body string) int {
		req := httptest.NewRequest(http.MethodPost, "http://169.254.169.254"+maintenance.Path, strings.NewReader(body))
		req.RemoteAddr, req.Header = from+":41000", http.Header{"Metadata": {"true"}}
		w := httptest.NewRecorder()
		s.ServeHTTP(w, req)
		return w.Code
	}
	for _, refused := range []struct{ from, body string }{
		{"10.0.1.5", `{"StartRequests": [{"EventId": "e1"}]}`}, // not that machine's event
		{"10.0.1.4", `{"StartRequests": [{"EventId": "e2"}]}`},
		{"10.0.1.4", `{"StartRequests": []}`},
		{"10.0.1.4", `{"StartRequests": [`},
	} {
		if code := post(refused.from, refused.body); code != http.StatusBadRequest {
			t.Errorf("%s from %s: HTTP %d, want 400", refused.body, refused.from, code)
		}
	}
	if len(s.Started()) != 0 {
		t.Fatalf("refused requests started %v", s.Started())
	}
	if code := post("10.0.1.4", `{"StartRequests": [{"EventId": "e1"}]}`); code != http.StatusOK {
		t.Fatalf("start e1: HTTP %d", code)
	}
	doc = get("10.0.1.4")
	if e := doc.Events[0]; e.EventStatus != "Started" || e.NotBefore != "" || doc.DocumentIncarnation != 3 {
		t.Errorf("after the start: %+v", doc)
	}
	if _, ok := s.Started()["e1"]; !ok {
		t.Errorf("started: %v", s.Started())
	}
}
