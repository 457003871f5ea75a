// Package imds stands in for Azure's instance metadata service (deviation "instance metadata"):
// the real clients on a rehearsal's machines reach it at its usual address.
package imds

import (
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log"
	"maps"
	"net"
	"net/http"
	"os"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/clusterforge/clusterforge/test/standin"
	"github.com/clusterforge/clusterforge/test/standin/entra"

	"github.com/clusterforge/clusterforge/components/attestation"
	"github.com/clusterforge/clusterforge/components/ops/maintenance"
	"github.com/clusterforge/clusterforge/components/wellknown"
)

// InstanceMetadata is what the stand-in for Azure's instance metadata service knows of one
// machine: the fields clusterforge's units ask for, in Azure's document shape.
type InstanceMetadata struct {
	Name       string `json:"name"`
	ResourceID string `json:"resourceId"`
	// VMID is Azure's unique id of the VM, which its attested document names.
	VMID     string `json:"vmId"`
	Zone     string `json:"zone"`
	Location string `json:"location"`
	VMSize   string `json:"vmSize"`
	// PrivateIP is the primary NIC's address; SubnetAddress and SubnetPrefix its subnet.
	PrivateIP     string `json:"privateIp"`
	SubnetAddress string `json:"subnetAddress"`
	SubnetPrefix  int    `json:"subnetPrefix"`
	// Identities are the client ids of the machine's user-assigned identities.
	Identities []string `json:"identities,omitempty"`
}

// document is the machine's /metadata/instance document as Azure (api-version 2021-02-01) shapes it.
func (m InstanceMetadata) document() map[string]any {
	return map[string]any{
		"compute": map[string]any{
			"name": m.Name, "resourceId": m.ResourceID, "vmId": m.VMID, "subscriptionId": m.subscription(), "zone": m.Zone,
			"location": m.Location, "vmSize": m.VMSize, "osType": "Linux",
		},
		"network": map[string]any{"interface": []any{map[string]any{
			"ipv4": map[string]any{
				"ipAddress": []any{map[string]any{"privateIpAddress": m.PrivateIP, "publicIpAddress": ""}},
				"subnet":    []any{map[string]any{"address": m.SubnetAddress, "prefix": strconv.Itoa(m.SubnetPrefix)}},
			},
		}}},
	}
}

// Server serves /metadata/instance to each machine about itself, telling machines apart by their
// source address, as Azure's service answers each VM (deviation "instance metadata"), and
// /metadata/scheduledevents, the events a drill has planned for it. A machine may start one of its
// events early (a POST of StartRequests); the event is then served Started, without NotBefore.
// With a Signer it serves each machine's attested document too.
type Server struct {
	// Machines maps a machine's address to its metadata.
	Machines map[string]InstanceMetadata
	// MachinesFile, when set, holds Machines as JSON and is read at each request: a scale set's
	// growth adds machines while the service runs (a file's time may not change between two
	// quick writes).
	MachinesFile string
	Signer       *Signer
	// Entra issues the machines' identities' tokens; nil serves none.
	Entra *entra.Server
	// ScheduledEvents are the events of the machine at an address; nil serves none.
	ScheduledEvents func(address string) (maintenance.Document, error)

	mu      sync.Mutex
	started map[string]time.Time
}

// machine is the metadata of the machine at host, from MachinesFile as it is now when set.
func (s *Server) machine(host string) (InstanceMetadata, bool, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.MachinesFile != "" {
		data, err := os.ReadFile(s.MachinesFile)
		if err != nil {
			return InstanceMetadata{}, false, err
		}
		var all map[string]InstanceMetadata
		if err := json.Unmarshal(data, &all); err != nil {
			return InstanceMetadata{}, false, fmt.Errorf("%s: %w", s.MachinesFile, err)
		}
		s.Machines = all
	}
	m, ok := s.Machines[host]
	return m, ok, nil
}

// Started says which events machines started early, and when.
func (s *Server) Started() map[string]time.Time {
	s.mu.Lock()
	defer s.mu.Unlock()
	return maps.Clone(s.started)
}

// ServeHTTP answers like Azure's service: the Metadata: true header is required and a proxied
// request (X-Forwarded-For) is refused; format=text returns a leaf's value or a node's keys.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	fail := func(code int, msg string) {
		w.Header().Set("Content-Type", "application/json; charset=utf-8")
		w.WriteHeader(code)
		_ = json.NewEncoder(w).Encode(map[string]string{"error": msg})
	}
	if r.URL.Path == IssuerPath && s.Signer != nil { // a public certificate, as Azure's PKI serves it
		w.Header().Set("Content-Type", "application/pkix-cert")
		_, _ = w.Write(s.Signer.Issuer.Raw)
		return
	}
	if r.Header.Get("Metadata") != "true" || r.Header.Get("X-Forwarded-For") != "" {
		fail(http.StatusBadRequest, "Bad request. Required metadata header not specified")
		return
	}
	if r.URL.Query().Get("api-version") == "" {
		fail(http.StatusBadRequest, "Bad request. api-version was not specified in the request")
		return
	}
	host, _, _ := net.SplitHostPort(r.RemoteAddr)
	m, ok, err := s.machine(host)
	if err != nil {
		fail(http.StatusInternalServerError, err.Error())
		return
	}
	if !ok {
		fail(http.StatusNotFound, "no machine has address "+host)
		return
	}
	if r.URL.Path == "/metadata/scheduledevents" {
		doc, err := s.scheduledEvents(host)
		if err != nil {
			fail(http.StatusInternalServerError, err.Error())
			return
		}
		if r.Method == http.MethodPost {
			if err := s.start(doc, r.Body); err != nil {
				fail(http.StatusBadRequest, err.Error())
			}
			return
		}
		w.Header().Set("Content-Type", "application/json; charset=utf-8")
		_ = json.NewEncoder(w).Encode(doc)
		return
	}
	if r.URL.Path == IdentityPath && s.Entra != nil {
		s.identityToken(w, r, m)
		return
	}
	if r.URL.Path == attestation.Path && s.Signer != nil {
		doc, err := s.Signer.Document(m, r.URL.Query().Get("nonce"), time.Now())
		if err != nil {
			fail(http.StatusBadRequest, err.Error())
			return
		}
		w.Header().Set("Content-Type", "application/json; charset=utf-8")
		_ = json.NewEncoder(w).Encode(doc)
		return
	}
	rest, ok := strings.CutPrefix(r.URL.Path, "/metadata/instance")
	if !ok {
		fail(http.StatusNotFound, "Not found")
		return
	}
	var node any = m.document()
	for _, key := range strings.Split(strings.Trim(rest, "/"), "/") {
		if key == "" {
			continue
		}
		switch n := node.(type) {
		case map[string]any:
			node, ok = n[key]
		case []any:
			i, err := strconv.Atoi(key)
			ok = err == nil && i >= 0 && i < len(n)
			if ok {
				node = n[i]
			}
		default:
			ok = false
		}
		if !ok {
			fail(http.StatusNotFound, "Not found")
			return
		}
	}
	if r.URL.Query().Get("format") != "text" {
		w.Header().Set("Content-Type", "application/json; charset=utf-8")
		_ = json.NewEncoder(w).Encode(node)
		return
	}
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	switch n := node.(type) {
	case map[string]any:
		keys := make([]string, 0, len(n))
		for k, v := range n {
			if _, leaf := v.(string); !leaf {
				k += "/"
			}
			keys = append(keys, k)
		}
		sort.Strings(keys)
		fmt.Fprint(w, strings.Join(keys, "\n"))
	case []any:
		for i := range n {
			fmt.Fprintf(w, "%d/\n", i)
		}
	default:
		fmt.Fprint(w, n)
	}
}

// scheduledEvents is the machine's document with the events it started marked Started.
func (s *Server) scheduledEvents(address string) (maintenance.Document, error) {
	doc := maintenance.Document{Events: []maintenance.Event{}}
	if s.ScheduledEvents != nil {
		var err error
		if doc, err = s.ScheduledEvents(address); err != nil {
			return doc, err
		}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	for i, e := range doc.Events {
		if _, ok := s.started[e.EventID]; ok {
			doc.Events[i].EventStatus, doc.Events[i].NotBefore = "Started", ""
			doc.DocumentIncarnation++ // Azure counts every change of the document
		}
	}
	return doc, nil
}

// start records a POST of StartRequests for events of the machine's document.
func (s *Server) start(doc maintenance.Document, body io.Reader) error {
	var req maintenance.StartRequests
	if err := json.NewDecoder(io.LimitReader(body, 1<<20)).Decode(&req); err != nil || len(req.StartRequests) == 0 {
		return fmt.Errorf("Bad request. want {\"StartRequests\": [{\"EventId\": ...}]}")
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, r := range req.StartRequests {
		if !slices.ContainsFunc(doc.Events, func(e maintenance.Event) bool { return e.EventID == r.EventID }) {
			return fmt.Errorf("Bad request. no event %q is scheduled for this machine", r.EventID)
		}
	}
	if s.started == nil {
		s.started = map[string]time.Time{}
	}
	for _, r := range req.StartRequests {
		if _, ok := s.started[r.EventID]; !ok {
			s.started[r.EventID] = time.Now()
			log.Printf("scheduled event %s started early", r.EventID)
		}
	}
	return nil
}

// Main runs the stand-in from command-line flags until SIGTERM: `rehearse imds ...`.
func Main(args []string) error {
	fs := flag.NewFlagSet("imds", flag.ContinueOnError)
	listen := fs.String("listen", wellknown.IMDSAddress+":80", "host:port to serve")
	machines := fs.String("machines", "", "JSON file, read at each request: address → InstanceMetadata")
	events := fs.String("events", "", "JSON file, read at each request: address → scheduled events document (none when absent)")
	signing := fs.String("attestation-dir", "", "signing chain of attested documents (WriteSigningChain); none served when empty")
	tenant := fs.String("tenant", "", "Entra tenant of the machines' identities")
	tokenKey := fs.String("token-key", "", "Entra ID's token signing key (PEM); no identity tokens served when empty")
	if err := fs.Parse(args); err != nil {
		return err
	}
	s := &Server{MachinesFile: *machines}
	if _, _, err := s.machine(""); err != nil {
		return fmt.Errorf("imds: --machines: %w", err)
	}
	if *events != "" {
		s.ScheduledEvents = eventsFromFile(*events)
	}
	if *tokenKey != "" {
		key, err := entra.ReadSigningKey(*tokenKey)
		if err != nil {
			return fmt.Errorf("imds: --token-key: %w", err)
		}
		s.Entra = &entra.Server{Tenant: *tenant, SigningKey: key, Now: time.Now}
	}
	if *signing != "" {
		var err error
		if s.Signer, err = ReadSigner(*signing); err != nil {
			return fmt.Errorf("imds: --attestation-dir: %w", err)
		}
	}
	return standin.Serve(*listen, s, "", "", func() { log.Printf("instance metadata for %d machines on %s", len(s.Machines), *listen) })
}

// eventsFromFile reads the planned events of every machine from file at each request, so a drill
// plans a reboot by writing the file.
func eventsFromFile(file string) func(string) (maintenance.Document, error) {
	return func(address string) (maintenance.Document, error) {
		data, err := os.ReadFile(file)
		if errors.Is(err, os.ErrNotExist) {
			return maintenance.Document{Events: []maintenance.Event{}}, nil
		}
		if err != nil {
			return maintenance.Document{}, err
		}
		var all map[string]maintenance.Document
		if err := json.Unmarshal(data, &all); err != nil {
			return maintenance.Document{}, fmt.Errorf("%s: %w", file, err)
		}
		doc := all[address]
		if doc.Events == nil {
			doc.Events = []maintenance.Event{}
		}
		return doc, nil
	}
}
