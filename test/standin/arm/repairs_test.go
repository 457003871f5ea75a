package arm

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore"
	"github.com/Azure/azure-sdk-for-go/sdk/azcore/to"
	"github.com/Azure/azure-sdk-for-go/sdk/resourcemanager/compute/armcompute/v6"
)

// probe is the health extension's word on each address, set by the test.
type probe struct {
	mu        sync.Mutex
	unhealthy map[string]bool
	err       error
}

func (p *probe) health(addrs []string) func([]string) (map[string]bool, error) {
	return func([]string) (map[string]bool, error) {
		p.mu.Lock()
		defer p.mu.Unlock()
		out := map[string]bool{}
		for _, a := range addrs {
			out[a] = !p.unhealthy[a]
		}
		return out, p.err
	}
}

func (p *probe) fail(err error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.err = err
}

func (p *probe) set(addr string, unhealthy bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.unhealthy[addr] = unhealthy
}

// repairWorld is newWorld's scale sets plus "api" (5 instances, repairs enabled as the program
// enables them) and "big" (40), on a clock the test moves.
type repairWorld struct {
	*world
	probe *probe
	mu    sync.Mutex
	clock time.Time
}

func newRepairWorld(t *testing.T) *repairWorld {
	w := &repairWorld{world: newWorld(t), probe: &probe{unhealthy: map[string]bool{}}, clock: time.Now()}
	w.srv.Now = func() time.Time { w.mu.Lock(); defer w.mu.Unlock(); return w.clock }
	w.Entra.Now = w.srv.Now // tokens issued on the same clock
	var addrs []string
	set := func(name string, subnet, n int) {
		var ins []*Instance
		for i := range n {
			ip := fmt.Sprintf("10.0.%d.%d", subnet, i+4)
			addrs = append(addrs, ip)
			ins = append(ins, &Instance{PrivateIP: ip})
		}
		w.srv.AddScaleSet(ScaleSet{Name: name, SKU: "Standard_D16ds_v5", ComputerNamePrefix: name, Image: "image-1", Instances: ins,
			Repairs: &Repairs{Enabled: true, GracePeriod: "PT10M", Action: "Reimage"}})
	}
	set("api", 0, 5)
	set("big", 1, 40)
	// newWorld's cpu instances are probed too: a scale set without the policy is never repaired.
	for i := range 5 {
		ip := fmt.Sprintf("10.1.0.%d", i+4)
		addrs = append(addrs, ip)
		w.srv.scaleSets[0].Instances[i].PrivateIP = ip
		w.probe.set(ip, true)
	}
	w.srv.Health = w.probe.health(addrs)
	return w
}

func (w *repairWorld) advance(d time.Duration) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.clock = w.clock.Add(d)
}

func (w *repairWorld) reimaged() []string {
	w.fleet.mu.Lock()
	defer w.fleet.mu.Unlock()
	var out []string
	for _, d := range w.fleet.done {
		if strings.HasPrefix(d, "reimage ") {
			out = append(out, d[strings.LastIndex(d, " ")+1:])
		}
	}
	return out
}

// settle waits until no instance of any scale set is in an operation.
func (w *repairWorld) settle(t *testing.T) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
		busy := false
		for _, ss := range w.srv.ScaleSets() {
			for _, in := range ss.Instances {
				busy = busy || in.State != "Succeeded" && in.State != "Failed"
			}
		}
		if !busy {
			return
		}
	}
	t.Fatal("instances still in an operation after 10 s")
}

func (w *repairWorld) serviceState(t *testing.T, set string) armcompute.OrchestrationServiceState {
	t.Helper()
	view, err := w.compute(t, operator).NewVirtualMachineScaleSetsClient().GetInstanceView(context.Background(), group, set, nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range view.OrchestrationServices {
		if *s.ServiceName == armcompute.OrchestrationServiceNamesAutomaticRepairs {
			return *s.ServiceState
		}
	}
	t.Fatalf("%s's instance view has no AutomaticRepairs service: %+v", set, view)
	return ""
}

// Automatic instance repairs as Azure documents them: an instance failing its probe is reimaged
// once its grace period has passed, one at a time under 20 instances and 5 % at once above,
// what is already in an operation counted against that; repairs that leave their instance
// unhealthy suspend the service, which a caller resumes through the SDK.
func TestAutomaticRepairs(t *testing.T) {
	w := newRepairWorld(t)
	w.advance(11 * time.Minute)
	w.srv.repair()
	w.settle(t)
	if got := w.reimaged(); len(got) != 0 {
		t.Fatalf("healthy instances reimaged: %v", got)
	}

	// Two of five fail: one is repaired at a time. A second pass while it runs starts nothing.
	w.probe.set("10.0.0.4", true)
	w.probe.set("10.0.0.5", true)
	w.srv.repair()
	w.srv.repair()
	w.settle(t)
	if got := w.reimaged(); !slices.Equal(got, []string{"api000000"}) {
		t.Fatalf("reimaged %v, want api000000 alone (under 20 instances, one at a time; cpu has no policy)", got)
	}
	repairs := 0
	for _, c := range w.srv.Calls() {
		if c.Client == RepairsClient {
			repairs++
			if !strings.HasSuffix(c.Resource, "/virtualMachineScaleSets/api/virtualMachines/0") || c.Action != compute+"/virtualMachines/reimage/action" {
				t.Errorf("repair recorded as %+v", c)
			}
		}
	}
	if repairs != 1 {
		t.Errorf("%d repairs recorded, want 1", repairs)
	}
	// The repaired instance is back in its grace period; the other is next.
	w.probe.set("10.0.0.4", false)
	w.srv.repair()
	w.settle(t)
	if got := w.reimaged(); !slices.Equal(got, []string{"api000000", "api000001"}) {
		t.Fatalf("reimaged %v, want api000001 next", got)
	}
	w.probe.set("10.0.0.5", false)

	// 10 of 40 fail: 5 % (two) at once.
	for i := range 10 {
		w.probe.set(fmt.Sprintf("10.0.1.%d", 4+i), true)
	}
	w.srv.repair()
	w.settle(t)
	if got := w.reimaged()[2:]; len(got) != 2 {
		t.Fatalf("reimaged %v of big at once, want 2 (5 %% of 40)", got)
	}
	for i := range 10 {
		w.probe.set(fmt.Sprintf("10.0.1.%d", 4+i), false)
	}

	// No word from the probe: nothing is judged.
	w.probe.set("10.0.0.6", true)
	w.probe.fail(errors.New("no state"))
	w.advance(11 * time.Minute)
	before := len(w.reimaged())
	w.srv.repair()
	w.settle(t)
	if got := w.reimaged(); len(got) != before {
		t.Fatalf("repaired %v without the probe's word", got[before:])
	}
	w.probe.fail(nil)

	// api000002 stays unhealthy whatever is done: after RepairsBeforeSuspend repairs, the service
	// suspends itself.
	if s := w.serviceState(t, "api"); s != armcompute.OrchestrationServiceStateRunning {
		t.Fatalf("service %s before any failed repair, want Running", s)
	}
	for range RepairsBeforeSuspend + 1 {
		w.srv.repair()
		w.settle(t)
		w.advance(11 * time.Minute)
	}
	w.srv.repair()
	if got := w.reimaged()[before:]; len(got) != RepairsBeforeSuspend || slices.ContainsFunc(got, func(n string) bool { return n != "api000002" }) {
		t.Fatalf("reimaged %v, want api000002 %d times", got, RepairsBeforeSuspend)
	}
	if s := w.serviceState(t, "api"); s != armcompute.OrchestrationServiceStateSuspended {
		t.Fatalf("service %s after %d failed repairs, want Suspended", s, RepairsBeforeSuspend)
	}

	// A stranger may not resume it; the operator may, and repairs start again.
	resume := armcompute.OrchestrationServiceStateInput{ServiceName: to.Ptr(armcompute.OrchestrationServiceNamesAutomaticRepairs), Action: to.Ptr(armcompute.OrchestrationServiceStateActionResume)}
	_, err := w.compute(t, stranger).NewVirtualMachineScaleSetsClient().BeginSetOrchestrationServiceState(context.Background(), group, "api", resume, nil)
	var re *azcore.ResponseError
	if !errors.As(err, &re) || re.StatusCode != http.StatusForbidden {
		t.Fatalf("a stranger's resume: %v, want 403", err)
	}
	poller, err := w.compute(t, operator).NewVirtualMachineScaleSetsClient().BeginSetOrchestrationServiceState(context.Background(), group, "api", resume, nil)
	if err == nil {
		_, err = poller.PollUntilDone(context.Background(), nil)
	}
	if err != nil {
		t.Fatal(err)
	}
	if s := w.serviceState(t, "api"); s != armcompute.OrchestrationServiceStateRunning {
		t.Fatalf("service %s after resume, want Running", s)
	}
	w.srv.repair()
	w.settle(t)
	if got := w.reimaged(); got[len(got)-1] != "api000002" || len(got) != before+RepairsBeforeSuspend+1 {
		t.Fatalf("after resume reimaged %v, want api000002 once more", got[before:])
	}

}

// A policy Azure refuses is refused: a grace period out of PT10M-PT90M, or an action the stand-in
// does not serve.
func TestRepairsPolicyChecked(t *testing.T) {
	for _, tc := range []struct {
		p  Repairs
		ok bool
	}{
		{Repairs{Enabled: true, GracePeriod: "PT10M", Action: "Reimage"}, true},
		{Repairs{Enabled: true, GracePeriod: "PT1H30M", Action: "Reimage"}, true},
		{Repairs{Enabled: true, GracePeriod: "PT9M59S", Action: "Reimage"}, false},
		{Repairs{Enabled: true, GracePeriod: "PT91M", Action: "Reimage"}, false},
		{Repairs{Enabled: true, GracePeriod: "10m", Action: "Reimage"}, false},
		{Repairs{Enabled: true, GracePeriod: "PT", Action: "Reimage"}, false},
		{Repairs{Enabled: true, GracePeriod: "PT10M", Action: "Replace"}, false},
		{Repairs{Enabled: false, GracePeriod: "junk"}, true},
	} {
		if err := tc.p.Check(); (err == nil) != tc.ok {
			t.Errorf("%+v: %v, want ok %v", tc.p, err, tc.ok)
		}
	}
}

// RemoteMachines reach the machines another process serves, errors included.
func TestRemoteMachines(t *testing.T) {
	sock := filepath.Join(t.TempDir(), "machines.sock")
	ln, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	f := &fleet{}
	done := make(chan error, 1)
	go func() { done <- ServeMachines(ln, refusing{f}) }()
	m := RemoteMachines{Socket: sock}
	ctx := context.Background()
	if err := m.Reimage(ctx, Instance{ComputerName: "api000001", Image: "image-2"}); err != nil {
		t.Fatal(err)
	}
	if addr, err := m.Create(ctx, Instance{ID: "7", ComputerName: "cpu000007"}); err != nil || addr != "10.9.0.7" {
		t.Fatalf("create: %q, %v; want the address the host gave the machine", addr, err)
	}
	if err := m.Delete(ctx, Instance{ComputerName: "etcd"}); err == nil || !strings.Contains(err.Error(), "refused etcd") {
		t.Fatalf("delete: %v, want the host's refusal", err)
	}
	if out, _, err := m.RunCommand(ctx, "/x/vm1", []string{"true"}); err != nil || out != "ran true on vm1" {
		t.Fatalf("run command: %q, %v", out, err)
	}
	if !slices.Equal(f.done, []string{"reimage image-2 api000001", "create cpu000007"}) {
		t.Fatalf("the host did %v", f.done)
	}
	ln.Close()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if _, err := m.Create(ctx, Instance{}); err == nil {
		t.Fatal("a host that has gone answered")
	}
}

type refusing struct{ *fleet }

func (r refusing) Delete(context.Context, Instance) error { return errors.New("refused etcd") }

type failingReimage struct{ *fleet }

func (f failingReimage) Reimage(_ context.Context, in Instance) error {
	_ = f.note("reimage "+in.Image, in)
	return errors.New("the machine's host has gone")
}

// A reimage that fails leaves its instance Failed, which is neither repaired again nor counted as
// one in flight, and counts as a failed repair: the service suspends itself after
// RepairsBeforeSuspend of them.
func TestFailedReimagesSuspendRepairs(t *testing.T) {
	w := newRepairWorld(t)
	w.srv.Machines = failingReimage{w.fleet}
	for i := range 5 {
		w.probe.set(fmt.Sprintf("10.0.0.%d", i+4), true)
	}
	w.advance(11 * time.Minute)
	for range RepairsBeforeSuspend + 1 {
		w.srv.repair()
		w.settle(t)
	}
	if got := w.reimaged(); !slices.Equal(got, []string{"api000000", "api000001", "api000002"}) {
		t.Fatalf("reimaged %v, want api000000 to api000002, one after another, then no more", got)
	}
	if s := w.serviceState(t, "api"); s != armcompute.OrchestrationServiceStateSuspended {
		t.Fatalf("service %s after %d failed reimages, want Suspended", s, RepairsBeforeSuspend)
	}
}

// The health extension's probe: 200 is healthy, anything else or no answer a failure, and an
// instance turns unhealthy only after NumberOfProbes failures in a row.
func TestExtensionHealthCountsFailuresInARow(t *testing.T) {
	var mu sync.Mutex
	status := http.StatusOK
	srv := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.String() != "/livez?exclude=etcd" {
			http.NotFound(w, r)
			return
		}
		mu.Lock()
		defer mu.Unlock()
		w.WriteHeader(status)
	}))
	defer srv.Close()
	host, port, _ := net.SplitHostPort(srv.Listener.Addr().String())
	p, _ := strconv.Atoi(port)
	health := ExtensionHealth(HealthExtension{Port: p, RequestPath: "/livez?exclude=etcd", NumberOfProbes: 2})
	judge := func() bool {
		got, err := health([]string{host})
		if err != nil {
			t.Fatal(err)
		}
		return got[host]
	}
	if !judge() {
		t.Fatal("a 200 was judged unhealthy")
	}
	mu.Lock()
	status = http.StatusInternalServerError
	mu.Unlock()
	if !judge() {
		t.Error("one failure made the instance unhealthy; it takes two in a row")
	}
	if judge() {
		t.Error("two failures in a row left the instance healthy")
	}
	srv.Close()
	if judge() {
		t.Error("an instance that does not answer was judged healthy")
	}
}
