// Package fleet is the fleet benchmark (make bench-fleet): the project's own Azure code paths, the
// roller's worker batches, the grower and remediation's hand-back, driving Resource Manager's
// stand-in at a stack's full size, with no machines behind the instances. Time runs Speedup times
// faster than real time; every latency, throttling window and Retry-After shrinks with it, and
// the figures are given back in the model's time. What Kubernetes does (drains, a node's
// registration) is not part of it.
package fleet

import (
	"context"
	"fmt"
	"io"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/resourcemanager/compute/armcompute/v6"
	"golang.org/x/sync/errgroup"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/clusterforge/clusterforge/components/azurerbac"
	"github.com/clusterforge/clusterforge/components/change"
	"github.com/clusterforge/clusterforge/components/ops/joins"
	"github.com/clusterforge/clusterforge/components/ops/remediation"
	"github.com/clusterforge/clusterforge/components/ops/scaleset"
	"github.com/clusterforge/clusterforge/components/spec"
	"github.com/clusterforge/clusterforge/infra/rollazure"
	"github.com/clusterforge/clusterforge/test/standin/arm"
)

// The scenarios.
const (
	RollWorkers     = "roll-workers"
	GrowGPU         = "grow-gpu"
	Remediate       = "remediate"
	AutoscalerReads = "autoscaler-reads"
	ZoneOutage      = "zone-outage"
)

// Scenarios are every scenario, in the order they run.
var Scenarios = []string{RollWorkers, GrowGPU, Remediate, AutoscalerReads, ZoneOutage}

// RemediateShare is the share of the fleet the remediation scenario hands back at once.
const RemediateShare = 0.05

// Options configure one run.
type Options struct {
	Stack   string
	Cluster *spec.Cluster
	// Scale is the share of each scale set's capacity the fleet fills (1: the stack's full size).
	Scale float64
	// Speedup runs the model's time faster than real time.
	Speedup float64
	// Scenarios to run; all when empty.
	Scenarios []string
	Progress  io.Writer
}

// Point is the progress of a scenario: machines done after Minutes of the model's time.
type Point struct {
	Minutes float64 `json:"minutes"`
	Done    int     `json:"done"`
}

// Scenario is what one scenario did, in the model's time.
type Scenario struct {
	Name string `json:"name"`
	// Offered is how many machines (for the reads, lists) the scenario asked for; Delivered how
	// many reached the end state. A run that delivered less is invalid, neither fast nor slow.
	Offered   int     `json:"offered"`
	Delivered int     `json:"delivered"`
	Valid     bool    `json:"valid"`
	Hours     float64 `json:"hours"`
	// Calls counts the requests by Azure RBAC action; Throttled those answered 429;
	// RetriedEarly the requests made again before their Retry-After; FailedCalls the requests
	// answered with another error; Errors what the code under test returned.
	Calls     map[string]int `json:"calls"`
	Throttled int            `json:"throttled"`
	// ThrottledBy counts the 429s by the throttling policy that gave them.
	ThrottledBy  map[string]int `json:"throttledBy,omitempty"`
	RetriedEarly int            `json:"retriedEarly"`
	FailedCalls  int            `json:"failedCalls"`
	Errors       []string       `json:"errors,omitempty"`
	Progress     []Point        `json:"progress"`
	// Fabrics, for the growth, are the InfiniBand placement groups after each step: whole (every
	// instance of the set there, a gang of up to its size can start) and partly grown.
	Fabrics []Fabrics `json:"fabrics,omitempty"`
	// Reads, for the autoscaler's reads, are its High Cost Get VMSS requests a minute.
	Reads *Reads `json:"reads,omitempty"`
	// Outage, for the zone's outage, is what remediation, the brake and the autoscaler did.
	Outage *Outage `json:"outage,omitempty"`
}

// Reads are a client's requests a minute on one of Compute's throttling policies, in the model's
// time: the first minute (a restart lists everything), the steady minutes after it, the limit
// (the subscription bucket's refill a minute), the client's share of it and of the bucket's
// capacity (Burst, which the restart's minute may use) and what spec plans.
type Reads struct {
	Policy  string  `json:"policy"`
	First   int     `json:"first"`
	Median  float64 `json:"median"`
	Max     int     `json:"max"`
	Limit   int64   `json:"limit"`
	Share   int64   `json:"share"`
	Burst   int64   `json:"burst"`
	Planned int64   `json:"planned"`
}

// Fabrics counts single placement groups by how far they are grown.
type Fabrics struct {
	Whole  int `json:"whole"`
	Partly int `json:"partly"`
}

// Run runs the scenarios, each on a stand-in of its own.
func Run(ctx context.Context, o Options) ([]Scenario, error) {
	if o.Speedup <= 0 || o.Scale <= 0 || o.Scale > 1 {
		return nil, fmt.Errorf("fleet: speedup %g, scale %g: want a positive speedup and a scale in (0, 1]", o.Speedup, o.Scale)
	}
	names := o.Scenarios
	if len(names) == 0 {
		names = Scenarios
	}
	var out []Scenario
	for _, name := range names {
		if !slices.Contains(Scenarios, name) {
			return nil, fmt.Errorf("fleet: no scenario %q (have %v)", name, Scenarios)
		}
		s, err := o.run(ctx, name)
		if err != nil {
			return out, fmt.Errorf("%s: %w", name, err)
		}
		o.logf("%s: %d of %d offered in %.2f h (model), %d calls, %d throttled, %d retried early, %d failed", name, s.Delivered, s.Offered, s.Hours, total(s.Calls), s.Throttled, s.RetriedEarly, s.FailedCalls)
		if u := s.Outage; u != nil {
			o.logf("%s: %s", name, u)
		}
		if r := s.Reads; r != nil {
			o.logf("%s: %s a minute: %d in the restart's (burst share %d), then median %g, most %d; share %d of %d, planned %d", name, r.Policy, r.First, r.Burst, r.Median, r.Max, r.Share, r.Limit, r.Planned)
		}
		out = append(out, s)
	}
	return out, nil
}

func total(calls map[string]int) int {
	n := 0
	for _, c := range calls {
		n += c
	}
	return n
}

func (o Options) logf(format string, args ...any) {
	if o.Progress != nil {
		fmt.Fprintf(o.Progress, "==> "+format+"\n", args...)
	}
}

// operator is the principal the scenarios act as, with the role a roll needs.
const operator = "11111111-1111-1111-1111-00000000000b"

// fleet is one scenario's stand-in and its clock.
type fleet struct {
	o      Options
	srv    *arm.Server
	local  *arm.Local
	began  time.Time
	mu     sync.Mutex
	points []Point
	errs   []string
	// fabrics are the growth's InfiniBand placement groups after each step (Scenario.Fabrics).
	fabrics      []Fabrics
	reads        *Reads
	outageResult *Outage
}

// filled is how many instances a scale set holds at the run's scale.
func (o Options) filled(set spec.ScaleSet) int { return int(float64(set.MaxNodes)*o.Scale + 0.5) }

// start serves a stand-in holding the stack's scale sets, each filled to Scale of its capacity
// on image-1 under an image-2 model; the GPU pools' empty when grow.
func (o Options) start(grow bool) (*fleet, error) {
	c := o.Cluster
	srv := &arm.Server{Subscription: "00000000-0000-0000-0000-000000000000", ResourceGroup: c.ResourceGroup(), Location: c.Location, Speedup: o.Speedup}
	for _, set := range c.ScaleSets() {
		n := o.filled(set)
		if grow && set.Pool.IsGPU() {
			n = 0
		}
		ss := arm.ScaleSet{Name: set.AzureName, SKU: set.Pool.VMSize, Zones: set.Zones, ComputerNamePrefix: set.AzureName, Image: "image-2"}
		for range n {
			ss.Instances = append(ss.Instances, &arm.Instance{Image: "image-1"})
		}
		srv.AddScaleSet(ss)
	}
	local, err := arm.Start(srv, "22222222-2222-2222-2222-222222222222")
	if err != nil {
		return nil, err
	}
	local.Grant(operator, local.GroupID(), azurerbac.BuiltInRoleActions[azurerbac.RoleVirtualMachineContributor]...)
	return &fleet{o: o, srv: srv, local: local, began: time.Now()}, nil
}

func (f *fleet) clients() (*armcompute.ClientFactory, error) {
	return armcompute.NewClientFactory(f.srv.Subscription, f.local.Credential(operator), f.local.Options())
}

// model is a real span in the model's time, and back.
func (f *fleet) model(d time.Duration) time.Duration { return time.Duration(float64(d) * f.o.Speedup) }
func (f *fleet) real(d time.Duration) time.Duration  { return time.Duration(float64(d) / f.o.Speedup) }

func (f *fleet) done(n int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.points = append(f.points, Point{Minutes: f.model(time.Since(f.began)).Minutes(), Done: n})
}

func (f *fleet) failed(err error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.errs = append(f.errs, err.Error())
}

func (o Options) run(ctx context.Context, name string) (Scenario, error) {
	f, err := o.start(name == GrowGPU)
	if err != nil {
		return Scenario{}, err
	}
	defer f.local.Close()
	f.done(0)
	var offered, delivered int
	switch name {
	case RollWorkers:
		offered, delivered, err = f.rollWorkers(ctx)
	case GrowGPU:
		offered, delivered, err = f.growGPU(ctx)
	case Remediate:
		offered, delivered, err = f.remediate(ctx)
	case AutoscalerReads:
		offered, delivered, err = f.autoscalerReads(ctx)
	case ZoneOutage:
		offered, delivered, err = f.zoneOutage(ctx)
	}
	if err != nil {
		return Scenario{}, err
	}
	took := f.model(time.Since(f.began))
	s := Scenario{Name: name, Offered: offered, Delivered: delivered, Valid: delivered >= offered, Hours: took.Hours(),
		Calls: map[string]int{}, ThrottledBy: map[string]int{}, Errors: f.errs, Progress: f.points, Fabrics: f.fabrics, Reads: f.reads, Outage: f.outageResult}
	calls := f.srv.Calls()
	for i, c := range calls {
		s.Calls[strings.TrimPrefix(c.Action, "Microsoft.Compute/")]++
		switch {
		case c.Status == 429:
			s.Throttled++
			s.ThrottledBy[c.Throttled]++
			if again := nextCall(calls[i+1:], c); again != nil && again.Time.Sub(c.Time) < c.RetryAfter {
				s.RetriedEarly++
			}
		case c.Status >= 400:
			s.FailedCalls++
		}
	}
	return s, nil
}

// nextCall is the caller's next request of the same action on the same resource: a retry.
func nextCall(after []arm.Call, c arm.Call) *arm.Call {
	for i := range after {
		if a := &after[i]; a.Client == c.Client && a.Action == c.Action && a.Resource == c.Resource {
			return a
		}
	}
	return nil
}

// rollWorkers rolls every worker of the stack onto its scale sets' model as the roller does: the
// pools' batches (change.NewPlan, a canary then 5 %), each replaced by rollazure's ReplaceWorkers.
func (f *fleet) rollWorkers(ctx context.Context) (offered, delivered int, err error) {
	c := f.o.Cluster
	cf, err := f.clients()
	if err != nil {
		return 0, 0, err
	}
	target := &rollazure.Target{Cluster: c, Azure: rollazure.Clients{ScaleSets: cf.NewVirtualMachineScaleSetsClient(), ScaleSetVMs: cf.NewVirtualMachineScaleSetVMsClient()}}
	inv := change.Inventory{}
	for _, set := range f.srv.ScaleSets() {
		role := spec.WorkerRole(poolOf(c, set.Name))
		for _, in := range set.Instances {
			inv[role] = append(inv[role], in.ComputerName)
		}
	}
	desired := *c
	desired.Pools = slices.Clone(c.Pools)
	for i := range desired.Pools {
		desired.Pools[i].Image = "image-2"
	}
	plan, err := change.NewPlan(c, &desired, inv)
	if err != nil {
		return 0, 0, err
	}
	for _, stage := range plan.Stages {
		if stage.Kind != change.Workers {
			continue
		}
		for _, batch := range stage.Batches {
			offered += len(batch)
		}
	}
	for _, stage := range plan.Stages {
		if stage.Kind != change.Workers {
			continue
		}
		f.o.logf("%s: %d batches", stage.Role, len(stage.Batches))
		for _, batch := range stage.Batches {
			if err := target.ReplaceWorkers(ctx, batch); err != nil {
				f.failed(err)
				return offered, delivered, nil
			}
			delivered += len(batch)
			f.done(delivered)
		}
	}
	return offered, f.succeeded(func(_ string, in *arm.Instance) bool { return in.Image == "image-2" }), nil
}

func poolOf(c *spec.Cluster, scaleSet string) string {
	for _, s := range c.ScaleSets() {
		if s.AzureName == scaleSet {
			return s.Pool.Name
		}
	}
	return ""
}

// succeeded counts the created instances that match.
func (f *fleet) succeeded(match func(set string, in *arm.Instance) bool) int {
	n := 0
	for _, set := range f.srv.ScaleSets() {
		for _, in := range set.Instances {
			if in.State == "Succeeded" && match(set.Name, in) {
				n++
			}
		}
	}
	return n
}

// growGPU grows every GPU pool from empty to Scale of its size with joins.Grow and the stack's
// pace, through scaleset.Pool; a node counts as joined once its instance is created.
func (f *fleet) growGPU(ctx context.Context) (offered, delivered int, err error) {
	c := f.o.Cluster
	cf, err := f.clients()
	if err != nil {
		return 0, 0, err
	}
	pace := joins.PaceOf(c)
	pace.Pause, pace.StepTimeout = f.real(pace.Pause), f.real(pace.StepTimeout)
	for _, p := range c.Pools {
		if !p.IsGPU() {
			continue
		}
		pool, err := scaleset.PoolOf(c, p.Name, cf.NewVirtualMachineScaleSetsClient(), nil)
		if err != nil {
			return 0, 0, err
		}
		target := 0
		for _, s := range pool.Sets {
			target += f.o.filled(s)
		}
		offered += target
		grown := &created{Pool: pool, f: f, sets: pool.Sets, base: delivered}
		if err := joins.Grow(ctx, grown, target, pace, f.real(10*time.Second), f.o.Progress); err != nil {
			f.failed(err)
		}
		delivered += grown.count()
	}
	return offered, delivered, nil
}

// created is a pool whose nodes join as their instances are created: no kubelets here.
type created struct {
	*scaleset.Pool
	f    *fleet
	sets []spec.ScaleSet
	base int
}

func (p *created) count() int {
	return p.f.succeeded(func(set string, _ *arm.Instance) bool {
		return slices.ContainsFunc(p.sets, func(s spec.ScaleSet) bool { return s.AzureName == set })
	})
}

// SetCapacity is the pool's step, after which it counts the fabrics grown.
func (p *created) SetCapacity(ctx context.Context, n int) error {
	err := p.Pool.SetCapacity(ctx, n)
	var step Fabrics
	for _, s := range p.sets {
		if !s.SinglePlacementGroup {
			continue
		}
		switch have := p.f.succeeded(func(set string, _ *arm.Instance) bool { return set == s.AzureName }); {
		case have == s.MaxNodes:
			step.Whole++
		case have > 0:
			step.Partly++
		}
	}
	p.f.mu.Lock()
	defer p.f.mu.Unlock()
	p.f.fabrics = append(p.f.fabrics, step)
	return err
}

func (p *created) Joined(context.Context) (int, error) {
	n := p.count()
	p.f.done(p.base + n)
	return n, nil
}

// remediate hands back RemediateShare of the fleet's machines as the remediation controller does:
// remediation.Workers at a time, each through scaleset.Machines.Remove.
func (f *fleet) remediate(ctx context.Context) (offered, delivered int, err error) {
	cf, err := f.clients()
	if err != nil {
		return 0, 0, err
	}
	machines := &scaleset.Machines{VMs: cf.NewVirtualMachineScaleSetVMsClient(), Subscription: f.srv.Subscription, ResourceGroup: f.srv.ResourceGroup}
	var nodes []*corev1.Node
	sets := f.srv.ScaleSets()
	sort.Slice(sets, func(i, j int) bool { return sets[i].Name < sets[j].Name })
	all := 0
	for _, set := range sets {
		all += len(set.Instances)
		machines.ScaleSets = append(machines.ScaleSets, set.Name)
	}
	want := int(float64(all)*RemediateShare + 0.5)
	// Every scale set gives its share, as a fleet-wide fault spreads.
	for i := 0; len(nodes) < want; i++ {
		took := false
		for _, set := range sets {
			if i < len(set.Instances) && len(nodes) < want {
				in := set.Instances[i]
				nodes = append(nodes, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: in.ComputerName},
					Spec: corev1.NodeSpec{ProviderID: scaleset.ProviderIDPrefix + f.srv.ScaleSetID(set.Name) + "/virtualMachines/" + in.ID}})
				took = true
			}
		}
		if !took {
			break
		}
	}
	var work errgroup.Group
	work.SetLimit(remediation.Workers)
	var mu sync.Mutex
	for _, n := range nodes {
		work.Go(func() error {
			if err := machines.Remove(ctx, n); err != nil {
				f.failed(fmt.Errorf("%s: %w", n.Name, err))
				return nil
			}
			mu.Lock()
			defer mu.Unlock()
			delivered++
			f.done(delivered)
			return nil
		})
	}
	_ = work.Wait()
	// Delivered is what the stand-in no longer holds, not what Remove said.
	return len(nodes), all - f.succeeded(func(string, *arm.Instance) bool { return true }), ctx.Err()
}
