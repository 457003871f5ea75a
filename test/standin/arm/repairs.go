package arm

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"regexp"
	"strconv"
	"sync"
	"time"
)

// Repairs is a scale set's automatic instance repairs policy (automaticRepairsPolicy), in Azure's
// words, and the state of its orchestration service.
type Repairs struct {
	Enabled bool
	// GracePeriod is ISO 8601, PT10M to PT90M: how long after an instance's last change it is
	// not judged.
	GracePeriod string
	// Action is what a repair does; the stand-in serves Reimage, the one the program sets.
	Action string
	// Suspended is the AutomaticRepairs service suspended, by a caller or after repairs that
	// did not make their instances healthy.
	Suspended bool

	// failed counts repairs in a row after which their instance was still unhealthy.
	failed int
}

// RepairsBeforeSuspend is how many repairs in a row may leave their instance unhealthy before the
// service suspends itself: Azure says "repeated" and gives no number; this is the planning figure.
const RepairsBeforeSuspend = 3

// RepairsClient is the caller a repair's reimage is recorded as: Azure's platform, not a principal.
const RepairsClient = "AutomaticRepairs"

// repairsService is the orchestration service's name in a scale set's instance view.
const repairsService = "AutomaticRepairs"

// RepairEvery is how often, in the model's time, the service judges the instances.
const RepairEvery = 30 * time.Second

var isoDuration = regexp.MustCompile(`^PT(?:(\d+)H)?(?:(\d+)M)?(?:(\d+)S)?$`)

// Grace reads the grace period, refusing one Azure refuses.
func (p *Repairs) Grace() (time.Duration, error) {
	m := isoDuration.FindStringSubmatch(p.GracePeriod)
	if m == nil || p.GracePeriod == "PT" {
		return 0, fmt.Errorf("gracePeriod %q is not an ISO 8601 duration", p.GracePeriod)
	}
	var d time.Duration
	for i, unit := range []time.Duration{time.Hour, time.Minute, time.Second} {
		n, _ := strconv.Atoi(m[i+1]) // digits or empty
		d += time.Duration(n) * unit
	}
	if d < 10*time.Minute || d > 90*time.Minute {
		return 0, fmt.Errorf("gracePeriod %s: Azure takes PT10M to PT90M", p.GracePeriod)
	}
	return d, nil
}

// Check refuses a policy the stand-in cannot serve as Azure would.
func (p *Repairs) Check() error {
	if p == nil || !p.Enabled {
		return nil
	}
	if p.Action != "Reimage" {
		return fmt.Errorf("repairAction %q: the stand-in serves Reimage", p.Action)
	}
	_, err := p.Grace()
	return err
}

func (p *Repairs) state() string {
	switch {
	case p == nil || !p.Enabled:
		return "NotRunning"
	case p.Suspended:
		return "Suspended"
	}
	return "Running"
}

// RunRepairs judges every scale set whose repairs are enabled, every RepairEvery, until ctx ends:
// an instance the probe finds unhealthy, Succeeded and past its grace period is reimaged, at most
// 5 % of a scale set at once and one at a time under 20 instances, counting every instance in an
// operation as one in flight. An instance whose provisioning failed is not repaired, as on Azure.
func (s *Server) RunRepairs(ctx context.Context) {
	tick := time.NewTicker(s.real(RepairEvery))
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
			s.repair()
		}
	}
}

// repair starts the repairs due now.
func (s *Server) repair() {
	if s.Health == nil {
		return
	}
	var addrs []string
	s.mu.Lock()
	for _, ss := range s.scaleSets {
		if p := ss.Repairs; p != nil && p.Enabled && !p.Suspended {
			for _, in := range ss.Instances {
				addrs = append(addrs, in.PrivateIP)
			}
		}
	}
	s.mu.Unlock()
	if len(addrs) == 0 {
		return
	}
	healthy, err := s.Health(addrs)
	if err != nil {
		return // nothing judged without the probe's word
	}
	now := s.now()
	var due []Instance
	s.mu.Lock()
	for _, ss := range s.scaleSets {
		p := ss.Repairs
		if p == nil || !p.Enabled || p.Suspended {
			continue
		}
		grace, err := p.Grace()
		if err != nil {
			continue
		}
		grace = s.real(grace)
		gone := 0
		var unhealthy []*Instance
		for _, in := range ss.Instances {
			ok, probed := healthy[in.PrivateIP]
			switch {
			case in.State == "Failed":
			case in.State != "Succeeded":
				gone++
			case !probed || now.Sub(in.changed) < grace:
			case ok:
				if in.repaired {
					in.repaired, p.failed = false, 0
				}
			default:
				if in.repaired {
					in.repaired = false
					p.failed++
				}
				unhealthy = append(unhealthy, in)
			}
		}
		if p.failed >= RepairsBeforeSuspend {
			p.Suspended = true
			continue
		}
		limit := 1
		if len(ss.Instances) >= 20 {
			limit = max(1, len(ss.Instances)*5/100)
		}
		for _, in := range unhealthy[:max(0, min(len(unhealthy), limit-gone))] {
			in.State, in.repaired = "Updating", true
			due = append(due, *in)
		}
	}
	s.mu.Unlock()
	for _, in := range due {
		s.record(Call{Time: now, Client: RepairsClient, Method: http.MethodPost, Action: compute + "/virtualMachines/reimage/action",
			Status: http.StatusAccepted, Resource: s.ScaleSetID(in.ScaleSet) + "/virtualMachines/" + in.ID})
		go func() {
			time.Sleep(s.real(s.latency(OpReimage)))
			if err := s.finish(in, OpReimage); err != nil { // the instance is left Failed
				s.mu.Lock()
				defer s.mu.Unlock()
				if ss, err := s.findScaleSet(in.ScaleSet); err == nil && ss.Repairs != nil {
					ss.Repairs.failed++
				}
			}
		}()
	}
}

// instanceView is a scale set's instance view: the AutomaticRepairs service's state.
func (s *Server) instanceView(name string) func(http.ResponseWriter, *http.Request, string) *apiError {
	return func(w http.ResponseWriter, _ *http.Request, _ string) *apiError {
		s.mu.Lock()
		defer s.mu.Unlock()
		ss, aerr := s.findScaleSet(name)
		if aerr != nil {
			return aerr
		}
		writeJSON(w, http.StatusOK, map[string]any{
			"statuses":              []any{map[string]any{"code": "ProvisioningState/succeeded", "level": "Info"}},
			"orchestrationServices": []any{map[string]any{"serviceName": repairsService, "serviceState": ss.Repairs.state()}},
		})
		return nil
	}
}

// setOrchestrationServiceState suspends or resumes a scale set's AutomaticRepairs service; either
// starts counting failed repairs afresh.
func (s *Server) setOrchestrationServiceState(name string) func(http.ResponseWriter, *http.Request, string) *apiError {
	return func(w http.ResponseWriter, r *http.Request, caller string) *apiError {
		var body struct {
			ServiceName string `json:"serviceName"`
			Action      string `json:"action"`
		}
		if err := json.NewDecoder(r.Body).Decode(&body); err != nil || body.ServiceName != repairsService || body.Action != "Suspend" && body.Action != "Resume" {
			return errorf(http.StatusBadRequest, "InvalidParameter", "serviceName must be AutomaticRepairs and action Suspend or Resume.")
		}
		s.mu.Lock()
		ss, aerr := s.findScaleSet(name)
		if aerr == nil && (ss.Repairs == nil || !ss.Repairs.Enabled) {
			aerr = errorf(http.StatusConflict, "OperationNotAllowed", "Automatic repairs are not enabled on %s.", name)
		}
		if aerr != nil {
			s.mu.Unlock()
			return aerr
		}
		ss.Repairs.Suspended, ss.Repairs.failed = body.Action == "Suspend", 0
		s.mu.Unlock()
		s.begin(w, r, caller, OpModel, http.StatusAccepted, nil, func() ([]byte, *apiError) { return nil, nil })
		return nil
	}
}

// HealthExtension is the Application Health extension of a scale set whose repairs judge by it:
// on each instance it probes https://<the instance>:Port<RequestPath>, and NumberOfProbes failures
// in a row make the instance unhealthy.
type HealthExtension struct {
	Port           int
	RequestPath    string
	NumberOfProbes int
}

// ExtensionHealth probes each instance as its Application Health extension (1.0, binary health
// states) does, from the stand-in's host instead of the instance itself: HTTPS without verifying
// the serving certificate, 200 healthy, anything else or no answer a failure.
func ExtensionHealth(ext HealthExtension) func(addrs []string) (map[string]bool, error) {
	client := &http.Client{Timeout: 2 * time.Second,
		Transport: &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}, DisableKeepAlives: true}}
	var mu sync.Mutex
	failures := map[string]int{}
	return func(addrs []string) (map[string]bool, error) {
		out := map[string]bool{}
		for _, addr := range addrs {
			ok := false
			if resp, err := client.Get("https://" + net.JoinHostPort(addr, strconv.Itoa(ext.Port)) + ext.RequestPath); err == nil {
				_, _ = io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				ok = resp.StatusCode == http.StatusOK
			}
			mu.Lock()
			if ok {
				failures[addr] = 0
			} else {
				failures[addr]++
			}
			out[addr] = failures[addr] < ext.NumberOfProbes
			mu.Unlock()
		}
		return out, nil
	}
}
