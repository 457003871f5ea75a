// Package arm stands in for Azure Resource Manager and its Compute provider (deviation "Resource
// Manager"): the scale sets, scale-set VMs and VMs this project, cluster-autoscaler's Azure
// provider and the ops controller call, over HTTPS in Resource Manager's wire protocol. Changes
// are long-running operations (Azure-AsyncOperation and Location polling) that take the latencies
// the caller sets; every request is throttled by Compute's documented token buckets (429,
// Retry-After, x-ms-ratelimit-remaining-* headers); every caller shows an Entra ID access token
// and is authorized against its role assignments. Clients reach it as a custom cloud's Resource
// Manager endpoint.
package arm

import (
	"context"
	"crypto/rand"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"net/http"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/clusterforge/clusterforge/components/wellknown"
)

// Instance is one scale-set VM.
type Instance struct {
	ScaleSet     string
	ID           string
	ComputerName string
	VMID         string
	Zone         string
	// Image is the image of the model the instance runs; the scale set's may be newer.
	Image string
	// Extensions are the extensions of the model the instance runs, by name.
	Extensions []string
	// State is the provisioning state: Creating, Updating, Deleting, Succeeded or Failed.
	State string
	// PrivateIP is the primary NIC's address, which the load balancer and the health extension probe.
	PrivateIP string

	// changed is when the instance was created or an operation on it last finished.
	changed time.Time
	// repaired: a repair finished and its outcome is not judged yet.
	repaired bool
}

// ScaleSet is one uniform scale set and its instances.
type ScaleSet struct {
	Name               string
	SKU                string
	Zones              []string
	ComputerNamePrefix string
	// Image is the model's image reference.
	Image string
	// Extensions are the model's extensions, by name: a write of the model may add some.
	Extensions []string
	Tags       map[string]string
	// SinglePlacementGroup keeps the instances in one placement group (InfiniBand sizes).
	SinglePlacementGroup bool
	// Repairs is the automatic instance repairs policy; nil when none.
	Repairs   *Repairs
	Instances []*Instance
	nextID    int
	// writes counts the model's accepted writes: its ETag.
	writes int
}

// etag is the scale set's ETag as Azure writes it: a number, quoted.
func (ss *ScaleSet) etag() string { return strconv.Quote(strconv.Itoa(ss.writes + 1)) }

// VM is one standalone virtual machine (an etcd member).
type VM struct {
	Name, ComputerName, VMID string
}

// Machines is what stands behind the instances; nil when the model alone is driven.
type Machines interface {
	// Create starts a machine for a new instance and returns the private IP its NIC was given.
	Create(ctx context.Context, in Instance) (privateIP string, err error)
	Delete(ctx context.Context, in Instance) error
	// Reimage boots the instance afresh from in.Image.
	Reimage(ctx context.Context, in Instance) error
	// RunCommand runs a shell script on a VM or scale-set VM, named by its resource ID.
	RunCommand(ctx context.Context, resourceID string, script []string) (stdout, stderr string, err error)
}

// The kinds of long-running operation, each with its latency.
const (
	OpCreate     = "create"
	OpDelete     = "delete"
	OpReimage    = "reimage"
	OpUpgrade    = "upgrade"
	OpModel      = "model"
	OpRunCommand = "runCommand"
)

// DefaultLatencies are this project's planning figures for each operation on Azure (not an SLA):
// a new VM boots in two minutes, a reimage takes three, a delete one.
var DefaultLatencies = map[string]time.Duration{
	OpCreate: 2 * time.Minute, OpDelete: time.Minute, OpReimage: 3 * time.Minute,
	OpUpgrade: time.Minute, OpModel: 10 * time.Second, OpRunCommand: 30 * time.Second,
}

// Server is one subscription's Resource Manager in one region, holding one resource group.
type Server struct {
	Subscription, ResourceGroup, Location string
	Auth                                  *Authority
	Machines                              Machines
	// Latencies of each operation kind; DefaultLatencies when nil.
	Latencies map[string]time.Duration
	// Speedup runs the model's time faster than real time: latencies, throttling windows and
	// Retry-After all shrink by it (1 when 0).
	Speedup float64
	// PollInterval is the Retry-After a running operation's status asks for (10 s when 0).
	PollInterval time.Duration
	// PageSize is how many scale-set VMs a list page holds (100 when 0).
	PageSize int
	Now      func() time.Time
	// After runs f once d of real time has passed (a running operation's end); at once in a
	// goroutine of its own after a sleep when nil. A replay on a clock of its own runs it then.
	After func(d time.Duration, f func())
	// Record is told every request, once answered, and every repair.
	Record func(Call)
	// Health is the Application Health extension's word on each of the instances at addrs, by
	// private IP (ExtensionHealth). Automatic repairs judge instances by it; none run without it.
	Health func(addrs []string) (map[string]bool, error)
	// GalleryImages are the gallery image versions of the subscription, in any resource group, by
	// id, each with its tags (a bake's releases).
	GalleryImages map[string]map[string]string

	mu        sync.Mutex
	scaleSets []*ScaleSet
	vms       []*VM
	ops       map[string]*operation
	throttle  throttle
	calls     []Call
}

// Call is one request as the stand-in answered it.
type Call struct {
	Time   time.Time `json:"time"`
	Client string    `json:"client,omitempty"`
	Method string    `json:"method"`
	// Action is the Azure RBAC action the request performs.
	Action string `json:"action"`
	Status int    `json:"status"`
	// Resource is the resource the request acts on.
	Resource string `json:"resource,omitempty"`
	// Charged names the Compute policies the request draws on (Resource Manager's own aside).
	Charged []string `json:"charged,omitempty"`
	// Throttled names the policy that refused it (429), RetryAfter how long the caller was told to wait.
	Throttled  string        `json:"throttled,omitempty"`
	RetryAfter time.Duration `json:"retryAfter,omitempty"`
}

type operation struct {
	id, owner string
	start     time.Time
	end       time.Time
	status    string
	err       *apiError
	result    []byte
}

// AddScaleSet adds a scale set with its instances; an instance without an ID, VMID or computer
// name gets them as Azure gives them.
func (s *Server) AddScaleSet(set ScaleSet) {
	s.mu.Lock()
	defer s.mu.Unlock()
	given := set.Instances
	ss := &set
	ss.Instances = nil
	for _, in := range given {
		s.addInstance(ss, *in)
	}
	s.scaleSets = append(s.scaleSets, ss)
}

// AddVM adds a standalone VM.
func (s *Server) AddVM(vm VM) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if vm.VMID == "" {
		vm.VMID = uuid()
	}
	s.vms = append(s.vms, &vm)
}

// ScaleSets are copies of the scale sets and their instances as they are now.
func (s *Server) ScaleSets() []ScaleSet {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []ScaleSet
	for _, ss := range s.scaleSets {
		c := *ss
		if ss.Repairs != nil {
			r := *ss.Repairs
			c.Repairs = &r
		}
		c.Instances = nil
		for _, in := range ss.Instances {
			copied := *in
			c.Instances = append(c.Instances, &copied)
		}
		out = append(out, c)
	}
	return out
}

// Calls are every request answered so far.
func (s *Server) Calls() []Call {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.calls)
}

// addInstance names a new instance as Azure does: the next instance id, and the computer name
// prefix followed by the id in base 36, six digits.
func (s *Server) addInstance(ss *ScaleSet, in Instance) *Instance {
	if in.ID == "" {
		in.ID = strconv.Itoa(ss.nextID)
	}
	if n, err := strconv.Atoi(in.ID); err == nil && n >= ss.nextID {
		ss.nextID = n + 1
	}
	if in.ComputerName == "" {
		id, _ := strconv.ParseInt(in.ID, 10, 64)
		in.ComputerName = wellknown.ComputerName(ss.ComputerNamePrefix, id)
	}
	if in.VMID == "" {
		in.VMID = uuid()
	}
	if in.Image == "" {
		in.Image, in.Extensions = ss.Image, slices.Clone(ss.Extensions)
	}
	if in.State == "" {
		in.State = "Succeeded"
	}
	in.changed = s.now()
	if in.Zone == "" && len(ss.Zones) > 0 {
		in.Zone = ss.Zones[len(ss.Instances)%len(ss.Zones)]
	}
	in.ScaleSet = ss.Name
	p := &in
	ss.Instances = append(ss.Instances, p)
	return p
}

func (s *Server) now() time.Time {
	if s.Now != nil {
		return s.Now()
	}
	return time.Now()
}

func (s *Server) speedup() float64 {
	if s.Speedup <= 0 {
		return 1
	}
	return s.Speedup
}

// real is a span of the model's time in real time.
func (s *Server) real(d time.Duration) time.Duration { return time.Duration(float64(d) / s.speedup()) }

func (s *Server) latency(kind string) time.Duration {
	if d, ok := s.Latencies[kind]; ok {
		return d
	}
	return DefaultLatencies[kind]
}

// apiError is Resource Manager's error body.
type apiError struct {
	status  int
	Code    string `json:"code"`
	Message string `json:"message"`
	Details []any  `json:"details,omitempty"`
	Inner   any    `json:"innererror,omitempty"`
}

func (e *apiError) Error() string { return e.Code + ": " + e.Message }

func errorf(status int, code, format string, args ...any) *apiError {
	return &apiError{status: status, Code: code, Message: fmt.Sprintf(format, args...)}
}

// route is what a request does: its RBAC action, the scope it is authorized over, the throttling
// policies it is charged to, and its answer.
type route struct {
	action   string
	scope    string
	policies []Policy
	// resource is the throttled resource; "" charges the subscription buckets only.
	resource string
	// count is how many tokens it takes: a batch request charges one per instance.
	count  int
	handle func(w http.ResponseWriter, r *http.Request, caller string) *apiError
	// authorize replaces the check of an assignment over scope.
	authorize func(caller string) bool
	// missing is the answer for a resource that does not exist, given only to a caller who may
	// read or write it: Azure authorizes before it looks.
	missing *apiError
}

// cloudMetadata answers Resource Manager's cloud discovery, anonymous as on Azure: with api-version
// 2019-05-01 or later a list of clouds, here the one it serves, its endpoints and its token audiences.
// cluster-autoscaler's Azure provider reads it before it signs in, and fails on anything else.
func (s *Server) cloudMetadata(w http.ResponseWriter, r *http.Request) {
	if r.URL.Query().Get("api-version") == "" {
		writeJSON(w, http.StatusBadRequest, map[string]any{"error": errorf(http.StatusBadRequest, "MissingApiVersionParameter",
			"The api-version query parameter (?api-version=) is required for all requests.")})
		return
	}
	endpoint := "https://" + r.Host + "/"
	writeJSON(w, http.StatusOK, []map[string]any{{
		"name": "AzureCloud", "resourceManager": endpoint,
		"authentication": map[string]any{"loginEndpoint": s.Auth.AuthorityHost, "audiences": Audiences, "tenant": "common", "identityProvider": "AAD"},
		"suffixes":       map[string]any{"storage": "core.windows.net", "acrLoginServer": "azurecr.io"},
	}})
}

// missingRoute authorizes a request for a resource that does not exist as a read or a write of
// it, and then answers 404.
func missingRoute(r *http.Request, resourceType, id string, missing *apiError) *route {
	action := resourceType + "/read"
	if r.Method != http.MethodGet {
		action = resourceType + "/write"
	}
	return &route{action: action, scope: id, missing: missing}
}

// ServeHTTP authenticates the caller, throttles and authorizes the request, then answers it.
func (s *Server) ServeHTTP(rw http.ResponseWriter, r *http.Request) {
	call := Call{Time: s.now(), Method: r.Method}
	w := &statusWriter{ResponseWriter: rw, status: http.StatusOK}
	defer func() {
		call.Status = w.status
		s.record(call)
	}()
	fail := func(e *apiError) { writeJSON(w, e.status, map[string]any{"error": e}) }
	w.Header().Set("x-ms-request-id", uuid())
	if r.Method == http.MethodGet && strings.EqualFold(strings.TrimSuffix(r.URL.Path, "/"), "/metadata/endpoints") {
		s.cloudMetadata(w, r)
		return
	}
	caller, aerr := s.Auth.authenticate(r, s.now())
	if aerr != nil {
		w.Header().Set("WWW-Authenticate", `Bearer authorization_uri="`+s.Auth.AuthorityHost+s.Auth.Tenant+`", error="invalid_token", error_description="`+aerr.Message+`"`)
		fail(aerr)
		return
	}
	call.Client = caller
	rt, aerr := s.route(r)
	if aerr != nil {
		fail(aerr)
		return
	}
	call.Action, call.Resource = rt.action, rt.resource
	if rt.authorize != nil && !rt.authorize(caller) || rt.authorize == nil && !s.Auth.allowed(caller, rt.action, rt.scope) {
		fail(errorf(http.StatusForbidden, "AuthorizationFailed", "The client '%s' with object id '%s' does not have authorization to perform action '%s' over scope '%s' or the scope is invalid. If access was recently granted, please refresh your credentials.", caller, caller, rt.action, rt.scope))
		return
	}
	if rt.missing != nil {
		fail(rt.missing)
		return
	}
	arm := PolicySubscriptionReads
	switch r.Method {
	case http.MethodPut, http.MethodPatch, http.MethodPost:
		arm = PolicySubscriptionWrites
	case http.MethodDelete:
		arm = PolicySubscriptionDeletes
	}
	for _, p := range rt.policies {
		call.Charged = append(call.Charged, p.Name)
	}
	cs := charges(rt.resource, append([]Policy{arm}, rt.policies...)...)
	minute := s.real(time.Minute)
	s.mu.Lock()
	wait, refused := s.throttle.take(cs, float64(max(rt.count, 1)), s.now(), minute)
	headers := s.throttle.headers(cs, s.now(), minute)
	s.mu.Unlock()
	for k, v := range headers {
		w.Header().Set(k, v)
	}
	if refused != nil {
		call.Throttled, call.RetryAfter = refused.Name, wait
		s.retryAfter(w, wait)
		fail(&apiError{status: http.StatusTooManyRequests, Code: "OperationNotAllowed",
			Message: "The server rejected the request because too many requests have been received for this subscription.",
			Details: []any{map[string]string{"code": "TooManyRequests", "target": refused.Name,
				"message": fmt.Sprintf(`{"operationGroup":%q,"startTime":%q}`, refused.Name, s.now().UTC().Format(time.RFC3339))}},
			Inner: map[string]string{"internalErrorCode": "TooManyRequestsReceived"}})
		return
	}
	if e := rt.handle(w, r, caller); e != nil {
		fail(e)
	}
}

func (s *Server) record(call Call) {
	s.mu.Lock()
	s.calls = append(s.calls, call)
	s.mu.Unlock()
	if s.Record != nil {
		s.Record(call)
	}
}

// statusWriter keeps the status a handler answered, for the record.
type statusWriter struct {
	http.ResponseWriter
	status int
}

func (w *statusWriter) WriteHeader(code int) {
	w.status = code
	w.ResponseWriter.WriteHeader(code)
}

// retryAfter says when to come back: whole seconds as Azure does, and milliseconds besides when
// time runs faster than real time (a second is too coarse then).
func (s *Server) retryAfter(w http.ResponseWriter, wait time.Duration) {
	w.Header().Set("Retry-After", strconv.Itoa(int(math.Ceil(wait.Seconds()))))
	if s.speedup() > 1 {
		w.Header().Set("retry-after-ms", strconv.FormatInt(max(int64(math.Ceil(float64(wait)/float64(time.Millisecond))), 1), 10)) // never early
	}
}

func (s *Server) groupID() string {
	return "/subscriptions/" + s.Subscription + "/resourceGroups/" + s.ResourceGroup
}

// ScaleSetID is a scale set's resource ID.
func (s *Server) ScaleSetID(name string) string {
	return s.groupID() + "/providers/Microsoft.Compute/virtualMachineScaleSets/" + name
}

func (s *Server) operationURL(r *http.Request, id string) string {
	return "https://" + r.Host + "/subscriptions/" + s.Subscription + "/providers/Microsoft.Compute/locations/" + s.Location + "/operations/" + id
}

// route reads a request's path as Resource Manager does: names are case-insensitive.
func (s *Server) route(r *http.Request) (*route, *apiError) {
	seg := strings.Split(strings.Trim(r.URL.Path, "/"), "/")
	is := func(i int, want string) bool { return len(seg) > i && strings.EqualFold(seg[i], want) }
	if r.URL.Query().Get("api-version") == "" {
		return nil, errorf(http.StatusBadRequest, "MissingApiVersionParameter", "The api-version query parameter (?api-version=) is required for all requests.")
	}
	if !is(0, "subscriptions") || len(seg) < 2 || !strings.EqualFold(seg[1], s.Subscription) {
		return nil, errorf(http.StatusNotFound, "SubscriptionNotFound", "The subscription '%s' could not be found.", strings.Join(seg[1:min(2, len(seg))], ""))
	}
	notFound := errorf(http.StatusNotFound, "NotFound", "No route for %s %s.", r.Method, r.URL.Path)
	if is(2, "providers") && is(3, "Microsoft.Compute") && is(4, "locations") && is(6, "operations") && len(seg) == 8 {
		return s.operationRoute(r, seg[7]), nil
	}
	if !is(2, "resourceGroups") || len(seg) < 7 || !is(4, "providers") || !is(5, "Microsoft.Compute") {
		return nil, notFound
	}
	if is(6, "galleries") && is(8, "images") && is(10, "versions") && len(seg) == 12 && r.Method == http.MethodGet {
		return s.galleryImageRoute(r), nil
	}
	if !strings.EqualFold(seg[3], s.ResourceGroup) {
		return nil, errorf(http.StatusNotFound, "ResourceGroupNotFound", "Resource group '%s' could not be found.", seg[3])
	}
	rest := seg[6:]
	switch {
	case strings.EqualFold(rest[0], "virtualMachineScaleSets"):
		return s.scaleSetRoute(r, rest[1:])
	case strings.EqualFold(rest[0], "virtualMachines") && len(rest) == 1 && r.Method == http.MethodGet:
		// cluster-autoscaler lists the group's VMs at start-up, even in scale-set mode, and exits when refused.
		return &route{action: "Microsoft.Compute/virtualMachines/read", scope: s.groupID(), handle: s.listVMs}, nil
	case strings.EqualFold(rest[0], "virtualMachines") && len(rest) >= 2:
		return s.vmRoute(r, rest[1:])
	}
	return nil, notFound
}

// galleryImageRoute reads a gallery image version, which may sit in another resource group than
// the cluster's (a shared gallery), as `pulumi up` and forge read its tags.
func (s *Server) galleryImageRoute(r *http.Request) *route {
	const kind = "Microsoft.Compute/galleries/images/versions"
	id := r.URL.Path
	for known, tags := range s.GalleryImages {
		if strings.EqualFold(known, id) {
			doc := map[string]any{"id": known, "name": known[strings.LastIndex(known, "/")+1:], "type": kind, "location": s.Location,
				"tags": tags, "properties": map[string]any{"provisioningState": "Succeeded"}}
			return &route{action: kind + "/read", scope: known, handle: func(w http.ResponseWriter, _ *http.Request, _ string) *apiError {
				writeJSON(w, http.StatusOK, doc)
				return nil
			}}
		}
	}
	return missingRoute(r, kind, id, errorf(http.StatusNotFound, "ResourceNotFound", "The Resource '%s' was not found.", id))
}

func (s *Server) findScaleSet(name string) (*ScaleSet, *apiError) {
	for _, ss := range s.scaleSets {
		if strings.EqualFold(ss.Name, name) {
			return ss, nil
		}
	}
	return nil, errorf(http.StatusNotFound, "ResourceNotFound", "The Resource 'Microsoft.Compute/virtualMachineScaleSets/%s' under resource group '%s' was not found.", name, s.ResourceGroup)
}

func (ss *ScaleSet) instance(id string) (*Instance, *apiError) {
	for _, in := range ss.Instances {
		if in.ID == id {
			return in, nil
		}
	}
	return nil, errorf(http.StatusNotFound, "NotFound", "The entity was not found in this Azure location.")
}

const compute = "Microsoft.Compute/virtualMachineScaleSets"

func (s *Server) scaleSetRoute(r *http.Request, rest []string) (*route, *apiError) {
	group := s.groupID()
	if len(rest) == 0 {
		if r.Method != http.MethodGet {
			return nil, errorf(http.StatusMethodNotAllowed, "MethodNotAllowed", "%s is not allowed here.", r.Method)
		}
		return &route{action: compute + "/read", scope: group, policies: []Policy{PolicyListVMScaleSets}, handle: s.listScaleSets}, nil
	}
	name := rest[0]
	id := s.ScaleSetID(name)
	s.mu.Lock()
	_, missing := s.findScaleSet(name)
	s.mu.Unlock()
	if missing != nil {
		return missingRoute(r, compute, id, missing), nil
	}
	method := r.Method
	switch {
	case len(rest) == 1 && method == http.MethodGet:
		return &route{action: compute + "/read", scope: id, resource: id, policies: []Policy{PolicyLowCostGetVMScaleSet}, handle: s.getScaleSet(name)}, nil
	case len(rest) == 1 && (method == http.MethodPut || method == http.MethodPatch):
		return &route{action: compute + "/write", scope: id, resource: id, policies: []Policy{PolicyUpdateVMScaleSet}, handle: s.updateScaleSet(name)}, nil
	case len(rest) == 2 && method == http.MethodGet && strings.EqualFold(rest[1], "instanceView"):
		return &route{action: compute + "/read", scope: id, resource: id, policies: []Policy{PolicyLowCostGetVMScaleSet}, handle: s.instanceView(name)}, nil
	case len(rest) == 2 && method == http.MethodPost && strings.EqualFold(rest[1], "setOrchestrationServiceState"):
		return &route{action: compute + "/write", scope: id, resource: id, policies: []Policy{PolicyUpdateVMScaleSet}, handle: s.setOrchestrationServiceState(name)}, nil
	case len(rest) == 2 && method == http.MethodPost:
		batch, err := instanceIDs(r)
		if err != nil {
			return nil, err
		}
		action := strings.ToLower(rest[1])
		if len(batch) == 0 {
			if action != "reimage" {
				return nil, errorf(http.StatusBadRequest, "InvalidParameter", "instanceIds is required for %s.", rest[1])
			}
			// Azure reimages every instance when none is named.
			s.mu.Lock()
			ss, _ := s.findScaleSet(name)
			for _, in := range ss.Instances {
				batch = append(batch, in.ID)
			}
			s.mu.Unlock()
		}
		switch action {
		case "manualupgrade":
			return &route{action: compute + "/manualUpgrade/action", scope: id, policies: []Policy{PolicyUpdateVMScaleSet}, count: len(batch), handle: s.batch(name, batch, OpUpgrade)}, nil
		case "reimage":
			return &route{action: compute + "/reimage/action", scope: id, policies: []Policy{PolicyUpdateVMScaleSet}, count: len(batch), handle: s.batch(name, batch, OpReimage)}, nil
		case "delete":
			return &route{action: compute + "/delete/action", scope: id, resource: id, policies: []Policy{PolicyDeleteVMScaleSet}, count: len(batch), handle: s.batch(name, batch, OpDelete)}, nil
		}
	case len(rest) == 2 && strings.EqualFold(rest[1], "virtualMachines") && method == http.MethodGet:
		return &route{action: compute + "/virtualMachines/read", scope: id, resource: id, policies: []Policy{PolicyHighCostGetVMScaleSet}, handle: s.listInstances(name)}, nil
	case len(rest) >= 3 && strings.EqualFold(rest[1], "virtualMachines"):
		in := rest[2]
		vmID := id + "/virtualMachines/" + in
		switch {
		case len(rest) == 3 && method == http.MethodGet:
			return &route{action: compute + "/virtualMachines/read", scope: vmID, resource: vmID, policies: []Policy{PolicyGetVMScaleSetVMs}, handle: s.getInstance(name, in)}, nil
		case len(rest) == 3 && method == http.MethodDelete:
			return &route{action: compute + "/virtualMachines/delete", scope: vmID, resource: vmID, policies: []Policy{PolicyDeleteVMScaleSetVMs}, handle: s.batch(name, []string{in}, OpDelete)}, nil
		case len(rest) == 4 && method == http.MethodPost && strings.EqualFold(rest[3], "reimage"):
			return &route{action: compute + "/virtualMachines/reimage/action", scope: vmID, resource: vmID, policies: []Policy{PolicyUpdateVMScaleSetVMs}, handle: s.batch(name, []string{in}, OpReimage)}, nil
		case len(rest) == 4 && method == http.MethodGet && strings.EqualFold(rest[3], "networkInterfaces"):
			return &route{action: compute + "/virtualMachines/networkInterfaces/read", scope: vmID, resource: vmID, handle: s.instanceNICs(name, in, vmID)}, nil
		case len(rest) == 4 && method == http.MethodPost && strings.EqualFold(rest[3], "runCommand"):
			return &route{action: compute + "/virtualMachines/runCommand/action", scope: vmID, resource: vmID, policies: []Policy{PolicyUpdateVMScaleSetVMs}, handle: s.runCommand(vmID)}, nil
		}
	}
	return nil, errorf(http.StatusNotFound, "NotFound", "No route for %s %s.", r.Method, r.URL.Path)
}

func (s *Server) vmRoute(r *http.Request, rest []string) (*route, *apiError) {
	id := s.groupID() + "/providers/Microsoft.Compute/virtualMachines/" + rest[0]
	s.mu.Lock()
	i := slices.IndexFunc(s.vms, func(vm *VM) bool { return strings.EqualFold(vm.Name, rest[0]) })
	s.mu.Unlock()
	if i < 0 {
		return missingRoute(r, "Microsoft.Compute/virtualMachines", id, errorf(http.StatusNotFound, "ResourceNotFound",
			"The Resource 'Microsoft.Compute/virtualMachines/%s' under resource group '%s' was not found.", rest[0], s.ResourceGroup)), nil
	}
	switch {
	case len(rest) == 1 && r.Method == http.MethodGet:
		return &route{action: "Microsoft.Compute/virtualMachines/read", scope: id, resource: id, policies: []Policy{PolicyLowCostGetVM}, handle: s.getVM(i)}, nil
	case len(rest) == 2 && r.Method == http.MethodPost && strings.EqualFold(rest[1], "runCommand"):
		return &route{action: "Microsoft.Compute/virtualMachines/runCommand/action", scope: id, resource: id, policies: []Policy{PolicyUpdateVM}, handle: s.runCommand(id)}, nil
	}
	return nil, errorf(http.StatusNotFound, "NotFound", "No route for %s %s.", r.Method, r.URL.Path)
}

// operationRoute is an operation's status. Reading it is an action of its own, which clients with
// custom roles have been refused for lacking (Microsoft.Compute/locations/operations/read); its
// URL lies under no resource, and Azure asks for the action at the resource group ("Track
// asynchronous Azure operations": with permission on the resource alone, one can start an
// operation but not track it), so the stand-in does, and that the caller started the operation.
func (s *Server) operationRoute(r *http.Request, id string) *route {
	scope := "/subscriptions/" + s.Subscription + "/providers/Microsoft.Compute/locations/" + s.Location + "/operations/" + id
	const action = "Microsoft.Compute/locations/operations/read"
	return &route{action: action, scope: scope, resource: scope, policies: []Policy{PolicyGetOperation},
		authorize: func(caller string) bool {
			s.mu.Lock()
			op, ok := s.ops[id]
			s.mu.Unlock()
			return ok && op.owner == caller && s.Auth.allowed(caller, action, s.groupID())
		},
		handle: func(w http.ResponseWriter, r *http.Request, _ string) *apiError {
			s.mu.Lock()
			op, ok := s.ops[id]
			var o operation
			if ok {
				o = *op
			}
			s.mu.Unlock()
			if !ok {
				return errorf(http.StatusNotFound, "NotFound", "The operation '%s' was not found.", id)
			}
			if r.URL.Query().Get("monitor") == "true" { // the Location URL: 202 until done, then the result
				if o.status == "InProgress" {
					w.Header().Set("Location", s.operationURL(r, id)+"?monitor=true&api-version="+r.URL.Query().Get("api-version"))
					s.retryAfter(w, s.real(s.pollInterval()))
					w.WriteHeader(http.StatusAccepted)
					return nil
				}
				if o.err != nil {
					return o.err
				}
				if o.result == nil {
					w.WriteHeader(http.StatusOK)
					return nil
				}
				w.Header().Set("Content-Type", "application/json; charset=utf-8")
				_, _ = w.Write(o.result)
				return nil
			}
			doc := map[string]any{"name": id, "status": o.status, "startTime": o.start.UTC().Format(time.RFC3339Nano)}
			if o.status == "InProgress" {
				s.retryAfter(w, s.real(s.pollInterval()))
			} else {
				doc["endTime"] = o.end.UTC().Format(time.RFC3339Nano)
			}
			if o.err != nil {
				doc["error"] = o.err
			}
			writeJSON(w, http.StatusOK, doc)
			return nil
		}}
}

func (s *Server) pollInterval() time.Duration {
	if s.PollInterval > 0 {
		return s.PollInterval
	}
	return 10 * time.Second
}

// begin starts a long-running operation of kind owned by caller: work runs once its latency has
// passed, and the client is told where to poll.
func (s *Server) begin(w http.ResponseWriter, r *http.Request, caller, kind string, status int, body any, work func() ([]byte, *apiError)) {
	op := &operation{id: uuid(), owner: caller, start: s.now(), status: "InProgress"}
	s.mu.Lock()
	if s.ops == nil {
		s.ops = map[string]*operation{}
	}
	s.ops[op.id] = op
	s.mu.Unlock()
	after := s.After
	if after == nil {
		after = func(d time.Duration, f func()) { go func() { time.Sleep(d); f() }() }
	}
	after(s.real(s.latency(kind)), func() {
		result, err := work()
		s.mu.Lock()
		defer s.mu.Unlock()
		op.end, op.result, op.err, op.status = s.now(), result, err, "Succeeded"
		if err != nil {
			op.status = "Failed"
		}
	})
	url := s.operationURL(r, op.id) + "?api-version=" + r.URL.Query().Get("api-version")
	w.Header().Set("Azure-AsyncOperation", url)
	w.Header().Set("Location", strings.Replace(url, "?", "?monitor=true&", 1))
	s.retryAfter(w, s.real(s.pollInterval()))
	if body == nil {
		w.WriteHeader(status)
		return
	}
	writeJSON(w, status, body)
}

func (s *Server) listScaleSets(w http.ResponseWriter, _ *http.Request, _ string) *apiError {
	s.mu.Lock()
	defer s.mu.Unlock()
	var value []any
	for _, ss := range s.scaleSets {
		value = append(value, s.scaleSetJSON(ss))
	}
	writeJSON(w, http.StatusOK, map[string]any{"value": value})
	return nil
}

func (s *Server) getScaleSet(name string) func(http.ResponseWriter, *http.Request, string) *apiError {
	return func(w http.ResponseWriter, _ *http.Request, _ string) *apiError {
		s.mu.Lock()
		defer s.mu.Unlock()
		ss, err := s.findScaleSet(name)
		if err != nil {
			return err
		}
		writeJSON(w, http.StatusOK, s.scaleSetJSON(ss))
		return nil
	}
}

func (s *Server) scaleSetJSON(ss *ScaleSet) map[string]any {
	state := "Succeeded"
	for _, in := range ss.Instances {
		if in.State != "Succeeded" {
			state = "Updating"
		}
	}
	props := map[string]any{
		"provisioningState": state, "orchestrationMode": "Uniform", "upgradePolicy": map[string]any{"mode": "Manual"},
		"singlePlacementGroup": ss.SinglePlacementGroup,
		"virtualMachineProfile": map[string]any{
			"osProfile":      map[string]any{"computerNamePrefix": ss.ComputerNamePrefix},
			"storageProfile": map[string]any{"imageReference": map[string]any{"id": ss.Image}},
			"extensionProfile": map[string]any{"extensions": extensionsJSON(ss.Extensions, func(name string) map[string]any {
				return map[string]any{"name": name}
			})},
		},
	}
	if p := ss.Repairs; p != nil {
		props["automaticRepairsPolicy"] = map[string]any{"enabled": p.Enabled, "gracePeriod": p.GracePeriod, "repairAction": p.Action}
	}
	return map[string]any{
		"id": s.ScaleSetID(ss.Name), "name": ss.Name, "type": compute, "location": s.Location, "zones": ss.Zones, "tags": ss.Tags, "etag": ss.etag(),
		"sku": map[string]any{"name": ss.SKU, "tier": "Standard", "capacity": len(ss.Instances)}, "properties": props,
	}
}

// updateScaleSet takes a PUT or PATCH of the model: a new capacity adds instances (Creating until
// they boot) or removes the newest, as Azure's default scale-in does; a new image changes the
// model, not the instances. With If-Match, only over the model of that ETag (412 otherwise).
func (s *Server) updateScaleSet(name string) func(http.ResponseWriter, *http.Request, string) *apiError {
	return func(w http.ResponseWriter, r *http.Request, caller string) *apiError {
		var body struct {
			SKU *struct {
				Capacity *int `json:"capacity"`
			} `json:"sku"`
			Properties *struct {
				VirtualMachineProfile *struct {
					StorageProfile *struct {
						ImageReference *struct {
							ID string `json:"id"`
						} `json:"imageReference"`
					} `json:"storageProfile"`
					ExtensionProfile *struct {
						Extensions []struct {
							Name string `json:"name"`
						} `json:"extensions"`
					} `json:"extensionProfile"`
				} `json:"virtualMachineProfile"`
			} `json:"properties"`
		}
		if err := json.NewDecoder(r.Body).Decode(&body); err != nil {
			return errorf(http.StatusBadRequest, "InvalidRequestContent", "The request content was invalid and could not be deserialized: %v", err)
		}
		s.mu.Lock()
		ss, aerr := s.findScaleSet(name)
		if aerr != nil {
			s.mu.Unlock()
			return aerr
		}
		if match := r.Header.Get("If-Match"); match != "" && match != "*" && match != ss.etag() {
			s.mu.Unlock()
			return errorf(http.StatusPreconditionFailed, "PreconditionFailed", "Etag provided in if-match header %s does not match etag %s of resource %s.", match, ss.etag(), s.ScaleSetID(name))
		}
		if p := body.Properties; p != nil && p.VirtualMachineProfile != nil && p.VirtualMachineProfile.StorageProfile != nil && p.VirtualMachineProfile.StorageProfile.ImageReference != nil {
			ss.Image = p.VirtualMachineProfile.StorageProfile.ImageReference.ID
		}
		if p := body.Properties; p != nil && p.VirtualMachineProfile != nil && p.VirtualMachineProfile.ExtensionProfile != nil {
			ss.Extensions = nil
			for _, e := range p.VirtualMachineProfile.ExtensionProfile.Extensions {
				ss.Extensions = append(ss.Extensions, e.Name)
			}
		}
		var added, removed []Instance
		if body.SKU != nil && body.SKU.Capacity != nil {
			want := *body.SKU.Capacity
			if want < 0 {
				s.mu.Unlock()
				return errorf(http.StatusBadRequest, "InvalidParameter", "The value of parameter sku.capacity is invalid.")
			}
			for len(ss.Instances) < want {
				added = append(added, *s.addInstance(ss, Instance{State: "Creating"}))
			}
			for _, in := range ss.Instances[want:] {
				in.State = "Deleting"
				removed = append(removed, *in)
			}
		}
		ss.writes++
		doc := s.scaleSetJSON(ss)
		s.mu.Unlock()
		kind := OpModel
		if len(added) > 0 {
			kind = OpCreate
		} else if len(removed) > 0 {
			kind = OpDelete
		}
		// A machine that does not come up leaves its instance Failed, as the listings show; the
		// resize itself succeeds (the recorded autoscaler's replay holds the stand-in to that).
		s.begin(w, r, caller, kind, http.StatusOK, doc, func() ([]byte, *apiError) {
			for _, in := range added {
				_ = s.finish(in, OpCreate)
			}
			for _, in := range removed {
				_ = s.finish(in, OpDelete)
			}
			return nil, nil
		})
		return nil
	}
}

// instanceIDs reads a batch request's body: {"instanceIds": [...]}.
func instanceIDs(r *http.Request) ([]string, *apiError) {
	var body struct {
		InstanceIDs []string `json:"instanceIds"`
	}
	data, err := io.ReadAll(r.Body)
	if err == nil && len(data) > 0 {
		err = json.Unmarshal(data, &body)
	}
	if err != nil {
		return nil, errorf(http.StatusBadRequest, "InvalidRequestContent", "The request content was invalid and could not be deserialized: %v", err)
	}
	return body.InstanceIDs, nil
}

// batch runs one operation of kind on instances of a scale set: every one must exist.
func (s *Server) batch(name string, ids []string, kind string) func(http.ResponseWriter, *http.Request, string) *apiError {
	return func(w http.ResponseWriter, r *http.Request, caller string) *apiError {
		s.mu.Lock()
		ss, aerr := s.findScaleSet(name)
		if aerr != nil {
			s.mu.Unlock()
			return aerr
		}
		var found []*Instance
		for _, id := range ids {
			in, aerr := ss.instance(id)
			if aerr != nil {
				s.mu.Unlock()
				if kind == OpDelete && len(ids) == 1 {
					w.WriteHeader(http.StatusNoContent) // deleting what is gone succeeds
					return nil
				}
				return errorf(http.StatusBadRequest, "InvalidParameter", "Instance id %s of %s does not exist.", id, name)
			}
			if in.State != "Succeeded" {
				s.mu.Unlock()
				return errorf(http.StatusConflict, "OperationNotAllowed", "Operation on instance %s of %s is not allowed: it is %s by another operation.", id, name, in.State)
			}
			found = append(found, in)
		}
		var ins []Instance
		for _, in := range found {
			in.State = map[string]string{OpDelete: "Deleting", OpReimage: "Updating", OpUpgrade: "Updating"}[kind]
			ins = append(ins, *in)
		}
		if kind == OpDelete {
			ss.writes++ // the capacity changes, and the ETag with it
		}
		s.mu.Unlock()
		s.begin(w, r, caller, kind, http.StatusAccepted, nil, func() ([]byte, *apiError) {
			var failed []string
			for _, in := range ins {
				if err := s.finish(in, kind); err != nil {
					failed = append(failed, in.ID+": "+err.Error())
				}
			}
			if len(failed) > 0 {
				return nil, errorf(http.StatusInternalServerError, "InternalExecutionError", "%s", strings.Join(failed, "; "))
			}
			return nil, nil
		})
		return nil
	}
}

// finish completes an operation on one instance: the machine behind it first, then the model.
func (s *Server) finish(in Instance, kind string) error {
	ctx := context.Background()
	var err error
	var address string
	if s.Machines != nil {
		switch kind {
		case OpCreate:
			address, err = s.Machines.Create(ctx, in)
		case OpDelete:
			err = s.Machines.Delete(ctx, in)
		case OpReimage:
			err = s.Machines.Reimage(ctx, in)
		}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	ss, aerr := s.findScaleSet(in.ScaleSet)
	if aerr != nil {
		return aerr
	}
	i := slices.IndexFunc(ss.Instances, func(x *Instance) bool { return x.ID == in.ID })
	if i < 0 {
		return nil
	}
	switch {
	case kind == OpDelete && err == nil:
		ss.Instances = slices.Delete(ss.Instances, i, i+1)
		return nil
	case kind == OpUpgrade:
		ss.Instances[i].Image, ss.Instances[i].Extensions = ss.Image, slices.Clone(ss.Extensions)
	case kind == OpCreate && address != "":
		ss.Instances[i].PrivateIP = address
	}
	ss.Instances[i].State, ss.Instances[i].changed = "Succeeded", s.now()
	if err != nil {
		ss.Instances[i].State = "Failed"
	}
	return err
}

func (s *Server) instanceJSON(ss *ScaleSet, in *Instance, expand bool) map[string]any {
	id := s.ScaleSetID(ss.Name) + "/virtualMachines/" + in.ID
	props := map[string]any{
		"latestModelApplied": in.Image == ss.Image && slices.Equal(in.Extensions, ss.Extensions), "vmId": in.VMID, "provisioningState": in.State,
		"osProfile":      map[string]any{"computerName": in.ComputerName},
		"storageProfile": map[string]any{"imageReference": map[string]any{"id": in.Image}},
	}
	if expand {
		power := "PowerState/running"
		if in.State == "Creating" {
			power = "PowerState/starting"
		}
		props["instanceView"] = map[string]any{"statuses": []any{
			map[string]any{"code": "ProvisioningState/" + strings.ToLower(in.State)}, map[string]any{"code": power}}}
	}
	doc := map[string]any{"id": id, "name": ss.Name + "_" + in.ID, "instanceId": in.ID, "type": compute + "/virtualMachines",
		"location": s.Location, "sku": map[string]any{"name": ss.SKU, "tier": "Standard"}, "properties": props}
	// Azure lists the extensions of the model the instance runs as its child resources.
	if len(in.Extensions) > 0 {
		doc["resources"] = extensionsJSON(in.Extensions, func(name string) map[string]any {
			return map[string]any{"id": id + "/extensions/" + name, "name": name, "type": compute + "/virtualMachines/extensions"}
		})
	}
	if in.Zone != "" {
		doc["zones"] = []string{in.Zone}
	}
	return doc
}

func extensionsJSON(names []string, one func(name string) map[string]any) []any {
	out := []any{}
	for _, name := range names {
		out = append(out, one(name))
	}
	return out
}

// listInstances pages through a scale set's VMs, PageSize at a time, by $skiptoken.
func (s *Server) listInstances(name string) func(http.ResponseWriter, *http.Request, string) *apiError {
	return func(w http.ResponseWriter, r *http.Request, _ string) *apiError {
		s.mu.Lock()
		defer s.mu.Unlock()
		ss, aerr := s.findScaleSet(name)
		if aerr != nil {
			return aerr
		}
		from, _ := strconv.Atoi(r.URL.Query().Get("$skiptoken"))
		size := s.PageSize
		if size <= 0 {
			size = 100
		}
		ins := slices.Clone(ss.Instances)
		sort.SliceStable(ins, func(i, j int) bool { a, _ := strconv.Atoi(ins[i].ID); b, _ := strconv.Atoi(ins[j].ID); return a < b })
		value := []any{}
		for _, in := range ins[min(from, len(ins)):min(from+size, len(ins))] {
			value = append(value, s.instanceJSON(ss, in, strings.EqualFold(r.URL.Query().Get("$expand"), "instanceView")))
		}
		doc := map[string]any{"value": value}
		if from+size < len(ins) {
			q := r.URL.Query()
			q.Set("$skiptoken", strconv.Itoa(from+size))
			doc["nextLink"] = "https://" + r.Host + r.URL.Path + "?" + q.Encode()
		}
		writeJSON(w, http.StatusOK, doc)
		return nil
	}
}

func (s *Server) getInstance(name, id string) func(http.ResponseWriter, *http.Request, string) *apiError {
	return s.onInstance(name, id, func(r *http.Request, ss *ScaleSet, in *Instance) any {
		return s.instanceJSON(ss, in, strings.EqualFold(r.URL.Query().Get("$expand"), "instanceView"))
	})
}

// onInstance answers a read of instance id of scale set name with what answer makes of it, under
// the server's lock.
func (s *Server) onInstance(name, id string, answer func(*http.Request, *ScaleSet, *Instance) any) func(http.ResponseWriter, *http.Request, string) *apiError {
	return func(w http.ResponseWriter, r *http.Request, _ string) *apiError {
		s.mu.Lock()
		defer s.mu.Unlock()
		ss, aerr := s.findScaleSet(name)
		if aerr != nil {
			return aerr
		}
		in, aerr := ss.instance(id)
		if aerr != nil {
			return aerr
		}
		writeJSON(w, http.StatusOK, answer(r, ss, in))
		return nil
	}
}

// instanceNICs lists an instance's one network interface, as the Network provider does: the
// primary IP configuration holds the instance's address (the node's), secondary ones would hold
// its pods' (Azure CNI), which the stand-in's machines do not take from it.
func (s *Server) instanceNICs(name, id, vmID string) func(http.ResponseWriter, *http.Request, string) *apiError {
	return s.onInstance(name, id, func(_ *http.Request, _ *ScaleSet, in *Instance) any {
		nic := vmID + "/networkInterfaces/" + name + "-nic"
		return map[string]any{"value": []any{map[string]any{
			"id": nic, "name": name + "-nic", "location": s.Location,
			"properties": map[string]any{"primary": true, "provisioningState": "Succeeded", "ipConfigurations": []any{map[string]any{
				"id": nic + "/ipConfigurations/ipconfig1", "name": "ipconfig1",
				"properties": map[string]any{"primary": true, "privateIPAddress": in.PrivateIP, "privateIPAddressVersion": "IPv4", "privateIPAllocationMethod": "Dynamic"},
			}}},
		}}}
	})
}

func (s *Server) getVM(i int) func(http.ResponseWriter, *http.Request, string) *apiError {
	return func(w http.ResponseWriter, _ *http.Request, _ string) *apiError {
		s.mu.Lock()
		vm := *s.vms[i]
		s.mu.Unlock()
		writeJSON(w, http.StatusOK, s.vmJSON(vm))
		return nil
	}
}

func (s *Server) listVMs(w http.ResponseWriter, _ *http.Request, _ string) *apiError {
	s.mu.Lock()
	defer s.mu.Unlock()
	value := []any{}
	for _, vm := range s.vms {
		value = append(value, s.vmJSON(*vm))
	}
	writeJSON(w, http.StatusOK, map[string]any{"value": value})
	return nil
}

// vmJSON is a VM as Resource Manager describes it.
func (s *Server) vmJSON(vm VM) map[string]any {
	return map[string]any{"id": s.groupID() + "/providers/Microsoft.Compute/virtualMachines/" + vm.Name, "name": vm.Name,
		"type": "Microsoft.Compute/virtualMachines", "location": s.Location,
		"properties": map[string]any{"vmId": vm.VMID, "provisioningState": "Succeeded", "osProfile": map[string]any{"computerName": vm.ComputerName}}}
}

// runCommand runs a script on the machine behind a VM; its output is the operation's result, in
// the instance view statuses Azure's RunShellScript returns.
func (s *Server) runCommand(resourceID string) func(http.ResponseWriter, *http.Request, string) *apiError {
	return func(w http.ResponseWriter, r *http.Request, caller string) *apiError {
		var body struct {
			CommandID string   `json:"commandId"`
			Script    []string `json:"script"`
		}
		if err := json.NewDecoder(r.Body).Decode(&body); err != nil || body.CommandID != "RunShellScript" {
			return errorf(http.StatusBadRequest, "InvalidParameter", "Only RunShellScript with a script is served here.")
		}
		if s.Machines == nil {
			return errorf(http.StatusConflict, "OperationNotAllowed", "No machine stands behind %s.", resourceID)
		}
		s.begin(w, r, caller, OpRunCommand, http.StatusAccepted, nil, func() ([]byte, *apiError) {
			stdout, stderr, err := s.Machines.RunCommand(context.Background(), resourceID, body.Script)
			if err != nil {
				return nil, errorf(http.StatusInternalServerError, "VMAgentStatusCommunicationError", "%v", err)
			}
			result, _ := json.Marshal(map[string]any{"value": []any{ // strings always marshal
				map[string]any{"code": "ComponentStatus/StdOut/succeeded", "level": "Info", "displayStatus": "Provisioning succeeded", "message": stdout},
				map[string]any{"code": "ComponentStatus/StdErr/succeeded", "level": "Info", "displayStatus": "Provisioning succeeded", "message": stderr},
			}})
			return result, nil
		})
		return nil
	}
}

func writeJSON(w http.ResponseWriter, code int, v any) {
	w.Header().Set("Content-Type", "application/json; charset=utf-8")
	w.WriteHeader(code)
	_ = json.NewEncoder(w).Encode(v)
}

func uuid() string {
	b := make([]byte, 16)
	_, _ = rand.Read(b)
	b[6], b[8] = b[6]&0x0f|0x40, b[8]&0x3f|0x80
	return fmt.Sprintf("%x-%x-%x-%x-%x", b[0:4], b[4:6], b[6:8], b[8:10], b[10:])
}
