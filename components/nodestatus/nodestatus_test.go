package nodestatus

import (
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

func TestReadySaysWhyNot(t *testing.T) {
	now := time.Date(2026, 11, 25, 12, 0, 0, 0, time.UTC)
	node := func(conds ...corev1.NodeCondition) *corev1.Node {
		return &corev1.Node{Status: corev1.NodeStatus{Conditions: conds}}
	}
	for _, tc := range []struct {
		node *corev1.Node
		want string
	}{
		{node(corev1.NodeCondition{Type: corev1.NodeMemoryPressure, Status: corev1.ConditionFalse},
			corev1.NodeCondition{Type: corev1.NodeReady, Status: corev1.ConditionTrue}), ""},
		{node(corev1.NodeCondition{Type: corev1.NodeReady, Status: corev1.ConditionUnknown, Reason: "NodeStatusUnknown",
			Message: "Kubelet stopped posting node status.", LastHeartbeatTime: metav1.NewTime(now.Add(-95 * time.Second))}),
			"not Ready (Ready=Unknown NodeStatusUnknown: Kubelet stopped posting node status.; last heartbeat 1m35s ago)"},
		{node(), "not Ready (no Ready condition yet)"},
	} {
		err := Ready(tc.node, now)
		got := ""
		if err != nil {
			got = err.Error()
		}
		if got != tc.want {
			t.Errorf("Ready = %q, want %q", got, tc.want)
		}
		if IsReady(tc.node) != (tc.want == "") {
			t.Errorf("IsReady = %v for %q", !(tc.want == ""), tc.want)
		}
	}
}
