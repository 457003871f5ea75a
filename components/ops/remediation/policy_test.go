package remediation

import (
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
	markedAt := func(ago time.Duration) *corev1.Node {
		n := node(cond(corev1.NodeReady, corev1.ConditionTrue, time.Hour))
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

func TestValidateNamesTheField(t *testing.T) {
	for _, p := range []Policy{{Grace: time.Minute, HandBack: time.Hour}, {Problems: DefaultPolicy().Problems, HandBack: time.Hour}, {Problems: DefaultPolicy().Problems, Grace: time.Minute}} {
		if err := p.Validate(); err == nil {
			t.Errorf("%+v passed", p)
		}
	}
	if err := DefaultPolicy().Validate(); err != nil {
		t.Error(err)
	}
}
