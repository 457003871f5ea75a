package scale

import (
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/cache"
)

// A node is on time while its last status report is at most one report period and its lateness
// old; a node with no Ready condition yet is not.
func TestStatusOnTimeCountsNodesBehindTheirReport(t *testing.T) {
	now := time.Date(2026, 11, 27, 12, 0, 0, 0, time.UTC)
	store := cache.NewStore(cache.MetaNamespaceKeyFunc)
	node := func(name string, reported time.Duration, conditions bool) {
		n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name}}
		if conditions {
			n.Status.Conditions = []corev1.NodeCondition{
				{Type: corev1.NodeMemoryPressure, LastHeartbeatTime: metav1.NewTime(now)},
				{Type: corev1.NodeReady, Status: corev1.ConditionTrue, LastHeartbeatTime: metav1.NewTime(now.Add(-reported))},
			}
		}
		if err := store.Add(n); err != nil {
			t.Fatal(err)
		}
	}
	node("just-registered", 0, true)
	node("due", NodeStatusReport, true)
	node("late-but-within", NodeStatusReport+NodeStatusLate, true)
	node("behind", NodeStatusReport+NodeStatusLate+time.Second, true)
	node("never-reported", 0, false)
	l := &Load{nodes: store}
	if onTime, nodes := l.StatusOnTime(now); onTime != 3 || nodes != 5 {
		t.Errorf("StatusOnTime = %d of %d nodes, want 3 of 5", onTime, nodes)
	}
}
