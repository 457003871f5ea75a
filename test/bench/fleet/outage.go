package fleet

import (
	"context"
	"fmt"
	"sort"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/clusterforge/clusterforge/components/ops/brake"
	"github.com/clusterforge/clusterforge/components/ops/remediation"
	"github.com/clusterforge/clusterforge/components/ops/scaleset"
	"github.com/clusterforge/clusterforge/components/wellknown"
)

// OutageMinutes is how long the zone-outage scenario keeps one zone's nodes NotReady; the model
// runs as long again after it, for the marks to be lifted.
const OutageMinutes = 30

// Outage is what the fleet's removers did about one zone's outage while one machine of another
// zone broke: remediation's policy and the brake asked each model minute for every node as the
// controller asks them, and cluster-autoscaler's unready rule (its own, from its flags). Shipped
// is remediation as the stack runs it (its zone check, the stack's RemediationMaxUnhealthy), its
// hand-backs made through the stand-in; WithoutZones judges pools and the cluster alone at
// remediation's default 40 %, as cluster-api's machine health checks often do, its hand-backs
// counted, not made (thousands of deletions would only measure the stand-in).
type Outage struct {
	Zone         string       `json:"zone"`
	Down         int          `json:"down"`
	Nodes        int          `json:"nodes"`
	Shipped      OutageResult `json:"shipped"`
	WithoutZones OutageResult `json:"withoutZones"`
}

// OutageResult counts one remediation policy's decisions over the outage.
type OutageResult struct {
	MaxUnhealthy     float64 `json:"maxUnhealthy"`
	ZoneMaxUnhealthy float64 `json:"zoneMaxUnhealthy"`
	// Marked is the most nodes marked for replacement at once, the broken machine of another zone
	// left out; Held the nodes remediation's short-circuit kept unmarked at least once; Refused the
	// marks the brake turned away; HandedBack the instances deleted, the broken machine's left out;
	// Repaired the broken machine, once deleted.
	Marked     int `json:"marked"`
	Held       int `json:"held"`
	Refused    int `json:"refused"`
	HandedBack int `json:"handedBack"`
	Repaired   int `json:"repaired"`
	// MarkedAtEnd are marks still standing once the zone has been back OutageMinutes.
	MarkedAtEnd int `json:"markedAtEnd"`
	// AutoscalerHalted are the minutes cluster-autoscaler's unready rule stopped it.
	AutoscalerHalted int `json:"autoscalerHalted"`
}

// zoneOutage puts the first zone's nodes NotReady for OutageMinutes and steps remediation and the
// brake through it minute by minute, on the model's clock, for the stack's threshold and for
// remediation's default.
// A node's pods run work, so a NotReady node's drain never ends (its kubelet cannot confirm a
// deletion); a Ready one's ends at once. Hand-backs delete the instance in the stand-in. Offered
// are the zone's nodes; delivered those present and unmarked at the end with the stack's threshold.
func (f *fleet) zoneOutage(ctx context.Context) (offered, delivered int, err error) {
	c := f.o.Cluster
	cf, err := f.clients()
	if err != nil {
		return 0, 0, err
	}
	out := &Outage{Zone: c.Zones[0]}
	machines := &scaleset.Machines{VMs: cf.NewVirtualMachineScaleSetVMsClient(), Subscription: f.srv.Subscription, ResourceGroup: f.srv.ResourceGroup}
	shipped, withoutZones := remediation.DefaultPolicy(), remediation.DefaultPolicy()
	shipped.MaxUnhealthy = c.RemediationMaxUnhealthy()
	withoutZones.ZoneMaxUnhealthy = 1
	for _, variant := range []struct {
		policy   remediation.Policy
		machines *scaleset.Machines
		into     *OutageResult
	}{{shipped, machines, &out.Shipped}, {withoutZones, nil, &out.WithoutZones}} {
		res, down, total, err := f.outage(ctx, variant.machines, out.Zone, variant.policy)
		if err != nil {
			return 0, 0, err
		}
		*variant.into = res
		if variant.into == &out.Shipped { // the figures of the fleet as the stack runs it
			out.Down, out.Nodes = down, total
			offered, delivered = down+1, down-res.HandedBack-res.MarkedAtEnd+res.Repaired
		}
	}
	f.outageResult = out
	return offered, delivered, nil
}

// outage runs one policy on the stand-in's fleet as it is now; with machines nil, hand-backs are
// counted and not made. The first node of another zone has a kernel deadlock from the start.
func (f *fleet) outage(ctx context.Context, machines *scaleset.Machines, zone string, policy remediation.Policy) (OutageResult, int, int, error) {
	c := f.o.Cluster
	limits := brake.DefaultPolicy()
	res := OutageResult{MaxUnhealthy: policy.MaxUnhealthy, ZoneMaxUnhealthy: policy.ZoneMaxUnhealthy}
	start := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	var nodes []*corev1.Node
	inZone, broken := map[string]bool{}, ""
	sets := f.srv.ScaleSets()
	sort.Slice(sets, func(i, j int) bool { return sets[i].Name < sets[j].Name })
	for _, set := range sets {
		if machines != nil {
			machines.ScaleSets = append(machines.ScaleSets, set.Name)
		}
		for _, in := range set.Instances {
			n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: in.ComputerName, Labels: map[string]string{
				wellknown.PoolLabel: poolOf(c, set.Name), wellknown.ZoneLabel: wellknown.ZoneLabelValue(c.Location, in.Zone)}},
				Spec: corev1.NodeSpec{ProviderID: scaleset.ProviderIDPrefix + f.srv.ScaleSetID(set.Name) + "/virtualMachines/" + in.ID},
				Status: corev1.NodeStatus{Conditions: []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionTrue,
					LastTransitionTime: metav1.NewTime(start.Add(-time.Hour))}}}}
			inZone[n.Name] = in.Zone == zone
			if !inZone[n.Name] && broken == "" {
				broken = n.Name
				n.Status.Conditions = append(n.Status.Conditions, corev1.NodeCondition{Type: wellknown.KernelDeadlockCondition,
					Status: corev1.ConditionTrue, LastTransitionTime: metav1.NewTime(start)})
			}
			nodes = append(nodes, n)
		}
	}
	total := len(nodes)
	var ledger []brake.Removal
	held := map[string]bool{}
	for minute := 0; minute <= 2*OutageMinutes; minute++ {
		if err := ctx.Err(); err != nil {
			return res, 0, 0, err
		}
		now := start.Add(time.Duration(minute) * time.Minute)
		down := minute < OutageMinutes
		fleet, unready, marked := brake.Fleet{}, 0, 0
		for _, n := range nodes {
			ready := &n.Status.Conditions[0]
			want := corev1.ConditionTrue
			if inZone[n.Name] && down {
				want = corev1.ConditionUnknown
			}
			if ready.Status != want {
				ready.Status, ready.LastTransitionTime = want, metav1.NewTime(now)
			}
			if ready.Status != corev1.ConditionTrue {
				unready++
			}
			fleet[n.Name] = brake.Present{Pool: n.Labels[wellknown.PoolLabel], Marked: isMarked(n)}
		}
		if autoscalerHalts(unready, total, c.Autoscaler.OkUnreadyCount, c.Autoscaler.MaxUnreadyPercentage) {
			res.AutoscalerHalted++
		}
		var kept []*corev1.Node
		for _, n := range nodes {
			step, reason, _ := policy.Next(n, now)
			gone := false
			switch step {
			case remediation.Mark:
				pool := n.Labels[wellknown.PoolLabel]
				if policy.TooManyUnhealthy(nodes, n) != nil {
					held[n.Name] = true
					break
				}
				removal := brake.Removal{Node: n.Name, Pool: pool, By: "remediation", At: now}
				if limits.Allow(now, ledger, removal, fleet) != nil {
					res.Refused++
					break
				}
				ledger = append(limits.Prune(now, ledger), removal)
				mark(n, reason, now)
				fleet[n.Name] = brake.Present{Pool: pool, Marked: true}
			case remediation.Drain:
				if n.Status.Conditions[0].Status != corev1.ConditionTrue {
					break // its pods stay Terminating while its kubelet is gone
				}
				fallthrough
			case remediation.HandBack:
				if machines != nil {
					if err := machines.Remove(ctx, n); err != nil {
						return res, 0, 0, fmt.Errorf("hand back %s: %w", n.Name, err)
					}
				}
				if n.Name == broken {
					res.Repaired++
				} else {
					res.HandedBack++
				}
				gone = true
			case remediation.Unmark:
				unmark(n)
			}
			if !gone {
				kept = append(kept, n)
				if isMarked(n) && n.Name != broken {
					marked++
				}
			}
		}
		nodes = kept
		res.Marked = max(res.Marked, marked)
		res.MarkedAtEnd = marked
	}
	res.Held = len(held)
	downCount := 0
	for _, z := range inZone {
		if z {
			downCount++
		}
	}
	return res, downCount, len(inZone), nil
}

// autoscalerHalts is cluster-autoscaler's own rule for a cluster too unhealthy to scale: more
// unready nodes than --ok-total-unready-count and than --max-total-unready-percentage of them.
func autoscalerHalts(unready, nodes, okCount, percentage int) bool {
	return unready > okCount && float64(unready) > float64(percentage)/100*float64(nodes)
}

func isMarked(n *corev1.Node) bool {
	for _, t := range n.Spec.Taints {
		if t.Key == brake.ReplaceTaint {
			return true
		}
	}
	return false
}

// mark is what the controller's mark writes: the cordon, the taint, the annotations.
func mark(n *corev1.Node, reason string, now time.Time) {
	n.Spec.Unschedulable = true
	n.Spec.Taints = append(n.Spec.Taints, corev1.Taint{Key: brake.ReplaceTaint, Effect: corev1.TaintEffectNoSchedule})
	n.Annotations = map[string]string{wellknown.ReasonAnnotation: reason, wellknown.SinceAnnotation: now.UTC().Format(time.RFC3339)}
}

func unmark(n *corev1.Node) {
	n.Spec.Unschedulable, n.Spec.Taints, n.Annotations = false, nil, nil
}

// String is the outage in a sentence, for the progress log and the report.
func (u *Outage) String() string {
	line := func(r OutageResult) string {
		return fmt.Sprintf("%d marked at most, %d held by remediation's short-circuit, %d refused by the brake, %d handed back, %d still marked at the end; the broken machine elsewhere repaired: %d",
			r.Marked, r.Held, r.Refused, r.HandedBack, r.MarkedAtEnd, r.Repaired)
	}
	return fmt.Sprintf("zone %s down %d minutes, %d of %d nodes NotReady, and one machine of another zone broken; cluster-autoscaler halted %d minutes. Remediation as the stack runs it (a zone out above %.0f%% of its nodes unhealthy, %.1f%% of each pool's nodes in the other zones): %s. Judging pools and the cluster alone, at %.0f%%: %s",
		u.Zone, OutageMinutes, u.Down, u.Nodes, u.Shipped.AutoscalerHalted, 100*u.Shipped.ZoneMaxUnhealthy, 100*u.Shipped.MaxUnhealthy, line(u.Shipped), 100*u.WithoutZones.MaxUnhealthy, line(u.WithoutZones))
}
