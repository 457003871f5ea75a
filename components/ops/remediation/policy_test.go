package remediation

import (
	"fmt"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/clusterforge/clusterforge/components/ops/brake"
	"github.com/clusterforge/clusterforge/components/wellknown"
)

func TestNextWaitsOutTheGraceThenMarksDrainsAndHandsBack(t *testing.T) {
	p := DefaultPolicy()
	now := time.Date(2026, 11, 25, 12, 0, 0, 0, time.UTC)
	node := func(conds ...corev1.NodeCondition) *corev1.Node {
		return &corev1.Node{Status: corev1.NodeStatus{Conditions: conds}}
	}
	cond := func(typ corev1.NodeConditionType, status corev1.ConditionStatus, ago time.Duration) corev1.NodeCondition {
		return corev1.NodeCondition{Type: typ, Status: status, LastTransitionTime: metav1.NewTime(now.Add(-ago)), Message: "m"}
	}
	markedAt := func(ago time.Duration, conds ...corev1.NodeCondition) *corev1.Node {
		if conds == nil {
			conds = []corev1.NodeCondition{cond(corev1.NodeReady, corev1.ConditionFalse, time.Hour)}
		}
		n := node(conds...)
		n.Spec.Taints = []corev1.Taint{{Key: brake.ReplaceTaint, Effect: corev1.TaintEffectNoSchedule}}
		n.Annotations = map[string]string{wellknown.SinceAnnotation: now.Add(-ago).Format(time.RFC3339)}
		return n
	}
	healthy := node(cond(corev1.NodeReady, corev1.ConditionTrue, time.Hour), cond("KernelDeadlock", corev1.ConditionFalse, time.Hour))
	for _, tc := range []struct {
		name   string
		node   *corev1.Node
		step   Step
		reason string
		again  time.Time
	}{
		{"healthy", healthy, Wait, "", time.Time{}},
		{"a deadlock within the grace", node(cond("KernelDeadlock", corev1.ConditionTrue, time.Minute)), Wait, "", now.Add(4 * time.Minute)},
		{"a deadlock past the grace", node(cond("KernelDeadlock", corev1.ConditionTrue, 5*time.Minute)), Mark,
			"KernelDeadlock=True since 2026-11-25T11:55:00Z: m", time.Time{}},
		{"not Ready past the grace", node(cond(corev1.NodeReady, corev1.ConditionUnknown, 6*time.Minute)), Mark,
			"Ready=Unknown since 2026-11-25T11:54:00Z: m", time.Time{}},
		{"two problems, the sooner due", node(cond("GPUProblem", corev1.ConditionTrue, time.Minute), cond(corev1.NodeReady, corev1.ConditionFalse, 3*time.Minute)),
			Wait, "", now.Add(2 * time.Minute)},
		{"marked an hour ago", markedAt(time.Hour), Drain, "", now.Add(23 * time.Hour)},
		{"marked a day ago", markedAt(24 * time.Hour), HandBack, "", time.Time{}},
		{"marked, Ready again for the grace", markedAt(time.Hour, cond(corev1.NodeReady, corev1.ConditionTrue, 5*time.Minute)), Unmark, "", time.Time{}},
		{"marked, Ready again within the grace", markedAt(time.Hour, cond(corev1.NodeReady, corev1.ConditionTrue, 4*time.Minute)), Drain, "", now.Add(23 * time.Hour)},
		{"marked, Ready but still deadlocked", markedAt(time.Hour, cond(corev1.NodeReady, corev1.ConditionTrue, time.Hour), cond("KernelDeadlock", corev1.ConditionTrue, time.Hour)),
			Drain, "", now.Add(23 * time.Hour)},
		{"marked a day ago, healthy since", markedAt(24*time.Hour, cond(corev1.NodeReady, corev1.ConditionTrue, time.Hour)), Unmark, "", time.Time{}},
		{"marked without a time", func() *corev1.Node { n := markedAt(0); n.Annotations = nil; return n }(), HandBack, "", time.Time{}},
		{"a reboot scheduled", node(cond("MaintenanceScheduled", corev1.ConditionTrue, 0)), Evacuate, "MaintenanceScheduled=True: m", time.Time{}},
		{"a reboot scheduled on a node broken past the grace", node(cond("MaintenanceScheduled", corev1.ConditionTrue, 0), cond("KernelDeadlock", corev1.ConditionTrue, time.Hour)),
			Mark, "KernelDeadlock=True since 2026-11-25T11:00:00Z: m", time.Time{}},
		{"evacuated, the reboot done", func() *corev1.Node {
			n := node(cond("MaintenanceScheduled", corev1.ConditionFalse, 0))
			n.Annotations = map[string]string{wellknown.EvacuateAnnotation: "r"}
			return n
		}(), Restore, "", time.Time{}},
		{"cordoned by a roll, not Ready past the grace", func() *corev1.Node {
			n := node(cond(corev1.NodeReady, corev1.ConditionUnknown, time.Hour))
			n.Spec.Unschedulable = true
			return n
		}(), Wait, "", time.Time{}},
		{"marked for removal by cluster-autoscaler, not Ready past the grace", func() *corev1.Node {
			n := node(cond(corev1.NodeReady, corev1.ConditionUnknown, time.Hour))
			n.Spec.Taints = []corev1.Taint{{Key: wellknown.AutoscalerDeletionTaint, Effect: corev1.TaintEffectNoSchedule}}
			return n
		}(), Wait, "", time.Time{}},
		{"cordoned by someone else, no maintenance", func() *corev1.Node {
			n := node(cond("MaintenanceScheduled", corev1.ConditionFalse, 0))
			n.Spec.Unschedulable = true
			return n
		}(),
			Wait, "", time.Time{}},
	} {
		step, reason, again := p.Next(tc.node, now)
		if step != tc.step || reason != tc.reason || !again.Equal(tc.again) {
			t.Errorf("%s: Next = %v %q %v, want %v %q %v", tc.name, step, reason, again, tc.step, tc.reason, tc.again)
		}
	}
}

func TestTooManyUnhealthyStopsMarkingAbove40PercentOfAPoolOrTheCluster(t *testing.T) {
	p := DefaultPolicy()
	fleet := func(pools map[string][2]int) []*corev1.Node { // pool → healthy, unhealthy
		var nodes []*corev1.Node
		for pool, counts := range pools {
			for i := range counts[0] + counts[1] {
				status := corev1.ConditionTrue
				if i >= counts[0] {
					status = corev1.ConditionUnknown
				}
				nodes = append(nodes, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{wellknown.PoolLabel: pool}},
					Status: corev1.NodeStatus{Conditions: []corev1.NodeCondition{{Type: corev1.NodeReady, Status: status}}}})
			}
		}
		return nodes
	}
	for _, tc := range []struct {
		name    string
		nodes   []*corev1.Node
		pool    string
		stopped bool
	}{
		{"4 of 10", fleet(map[string][2]int{"cpu": {6, 4}}), "cpu", false},
		{"the one node of a pool", fleet(map[string][2]int{"gpu": {0, 1}, "cpu": {10, 0}}), "gpu", false},
		{"one of a two-node pool", fleet(map[string][2]int{"gpu": {1, 1}, "cpu": {10, 0}}), "gpu", false},
		{"both of a two-node pool", fleet(map[string][2]int{"gpu": {0, 2}, "cpu": {10, 0}}), "gpu", true},
		{"5 of 10", fleet(map[string][2]int{"cpu": {5, 5}}), "cpu", true},
		{"5 of 10, a large healthy pool beside", fleet(map[string][2]int{"cpu": {5, 5}, "gpu": {100, 0}}), "cpu", true},
		{"the healthy pool's own node, the other pool down", fleet(map[string][2]int{"cpu": {0, 10}, "gpu": {20, 0}}), "gpu", false},
		{"half the cluster down across pools", fleet(map[string][2]int{"a": {7, 3}, "b": {0, 10}}), "a", true},
	} {
		node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{wellknown.PoolLabel: tc.pool}}}
		if err := p.TooManyUnhealthy(tc.nodes, node); (err != nil) != tc.stopped {
			t.Errorf("%s: TooManyUnhealthy = %v, want stopped %v", tc.name, err, tc.stopped)
		}
	}
}

func TestValidateNamesTheField(t *testing.T) {
	base := DefaultPolicy()
	for _, p := range []Policy{{Grace: time.Minute, HandBack: time.Hour, MaxUnhealthy: 0.4}, {Problems: base.Problems, HandBack: time.Hour, MaxUnhealthy: 0.4},
		{Problems: base.Problems, Grace: time.Minute, MaxUnhealthy: 0.4}, {Problems: base.Problems, Grace: time.Minute, HandBack: time.Hour}} {
		if err := p.Validate(); err == nil {
			t.Errorf("%+v passed", p)
		}
	}
	if err := DefaultPolicy().Validate(); err != nil {
		t.Error(err)
	}
}

// A zone's outage holds marking in that zone alone; the other zones of the pool keep being
// repaired unless their own failures spread past the stack's share.
func TestTooManyUnhealthyHoldsAZoneOnItsOwn(t *testing.T) {
	p := DefaultPolicy()
	p.MaxUnhealthy = 0.5 / 3                   // spec.RemediationMaxUnhealthy over three zones
	zones := func(bad ...int) []*corev1.Node { // 10 cpu nodes per zone, bad[i] of zone i unhealthy
		var nodes []*corev1.Node
		for z, b := range bad {
			for i := range 10 {
				status := corev1.ConditionTrue
				if i < b {
					status = corev1.ConditionFalse
				}
				nodes = append(nodes, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{wellknown.PoolLabel: "cpu", wellknown.ZoneLabel: fmt.Sprintf("eastus2-%d", z+1)}},
					Status: corev1.NodeStatus{Conditions: []corev1.NodeCondition{{Type: corev1.NodeReady, Status: status}}}})
			}
		}
		return nodes
	}
	in := func(zone int) *corev1.Node {
		return &corev1.Node{ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{wellknown.PoolLabel: "cpu", wellknown.ZoneLabel: fmt.Sprintf("eastus2-%d", zone)}}}
	}
	for _, tc := range []struct {
		name    string
		nodes   []*corev1.Node
		node    *corev1.Node
		stopped bool
	}{
		{"zone 1 down: its own node", zones(10, 1, 0), in(1), true},
		{"zone 1 down: a bad node of zone 2", zones(10, 1, 0), in(2), false},
		{"zone 1 down, zone 2 failing too", zones(10, 4, 0), in(2), true},
		{"half of zone 1: repaired, at the pool's share", zones(5, 0, 0), in(1), false},
		{"more than half of zone 1: out", zones(6, 0, 0), in(1), true},
		{"a bad batch of 3 in zone 1", zones(3, 0, 0), in(1), false},
		{"a failure spread over the zones", zones(2, 2, 2), in(3), true},
		{"zone 1 down, a third of zone 2 failing", zones(10, 3, 0), in(2), true},
		{"zones 1 and 2 down: a bad node of zone 3", zones(10, 10, 1), in(3), true},
		{"zone 1 down, a bad node of zone 3 while zone 2 fails", zones(10, 4, 1), in(3), true},
	} {
		if err := p.TooManyUnhealthy(tc.nodes, tc.node); (err != nil) != tc.stopped {
			t.Errorf("%s: TooManyUnhealthy = %v, want stopped %v", tc.name, err, tc.stopped)
		}
	}
}

// A zone is out by every pool's nodes in it: a pool with one node there is held with the rest, and
// a pool failing in every zone is a failure wider than a zone, which holds every pool.
func TestTooManyUnhealthyCountsAZoneAcrossPools(t *testing.T) {
	p := DefaultPolicy()
	p.MaxUnhealthy = 0.5 / 3
	node := func(pool string, zone int, bad bool) *corev1.Node {
		status := corev1.ConditionTrue
		if bad {
			status = corev1.ConditionFalse
		}
		labels := map[string]string{wellknown.PoolLabel: pool}
		if zone > 0 {
			labels[wellknown.ZoneLabel] = fmt.Sprintf("eastus2-%d", zone)
		}
		return &corev1.Node{ObjectMeta: metav1.ObjectMeta{Labels: labels},
			Status: corev1.NodeStatus{Conditions: []corev1.NodeCondition{{Type: corev1.NodeReady, Status: status}}}}
	}
	fleet := func(pool string, perZone int, badIn func(zone, i int) bool) []*corev1.Node {
		var nodes []*corev1.Node
		for zone := 1; zone <= 3; zone++ {
			for i := range perZone {
				nodes = append(nodes, node(pool, zone, badIn(zone, i)))
			}
		}
		return nodes
	}
	zoneDown := func(down int) func(zone, i int) bool { return func(zone, _ int) bool { return zone == down } }
	gpuIn := func(zone, n int) []*corev1.Node {
		var nodes []*corev1.Node
		for range n {
			nodes = append(nodes, node("gpu", zone, false))
		}
		return nodes
	}
	singleZone := func(n int) []*corev1.Node {
		var nodes []*corev1.Node
		for range n {
			nodes = append(nodes, node("cpu", 1, true))
		}
		return nodes
	}
	healthy := func(int, int) bool { return false }
	for _, tc := range []struct {
		name    string
		nodes   []*corev1.Node
		node    *corev1.Node
		stopped bool
	}{
		{"zone 2 down: the system pool's one node there", append(fleet("gpu", 100, zoneDown(2)), fleet("system", 1, zoneDown(2))...), node("system", 2, true), true},
		{"zone 2 down: the system pool's node of zone 3", append(fleet("gpu", 100, zoneDown(2)), append(fleet("system", 1, zoneDown(2)), node("system", 3, true))...), node("system", 3, true), false},
		{"the cpu pool failing in every zone, a few gpu nodes too", append(fleet("cpu", 100, func(_, _ int) bool { return true }), fleet("gpu", 100, func(_, i int) bool { return i < 20 })...), node("gpu", 1, true), true},
		{"unlabelled nodes beside an out zone, one bad", append(fleet("gpu", 100, zoneDown(1)), node("old", 0, true), node("old", 0, false), node("old", 0, false)), node("old", 0, true), false},
		{"unlabelled nodes beside an out zone, most bad", append(fleet("gpu", 100, zoneDown(1)), node("old", 0, true), node("old", 0, true), node("old", 0, false)), node("old", 0, true), true},
		{"no zone out, a bad node", append(fleet("gpu", 100, healthy), node("gpu", 1, true)), node("gpu", 1, true), false},
		{"zone 2 down: both of the system pool's other nodes bad", append(fleet("gpu", 100, zoneDown(2)), node("system", 1, true), node("system", 2, true), node("system", 3, true)), node("system", 1, true), true},
		{"zone 2 down: a bad gpu node while the cpu pool fails in zone 1", append(append(fleet("gpu", 100, zoneDown(2)), fleet("cpu", 10, func(zone, i int) bool { return zone == 1 && i < 3 })...), node("gpu", 3, true)), node("gpu", 3, true), true},
		{"zones 2 and 3 out by the cpu pool, a bad gpu node of zone 1", append(append(fleet("cpu", 10, func(zone, i int) bool { return zone > 1 && i < 6 }), gpuIn(1, 100)...), node("gpu", 1, true)), node("gpu", 1, true), true},
		{"the one zone out, unlabelled nodes mostly bad", append(append(singleZone(20), node("cpu", 0, true), node("cpu", 0, true)), node("cpu", 0, false), node("cpu", 0, false)), node("cpu", 0, true), true},
	} {
		if err := p.TooManyUnhealthy(tc.nodes, tc.node); (err != nil) != tc.stopped {
			t.Errorf("%s: TooManyUnhealthy = %v, want stopped %v", tc.name, err, tc.stopped)
		}
	}
}
