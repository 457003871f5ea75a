// Package nodestatus reads a Node's Ready condition the way every waiter here needs it: a yes or
// no, and when no, why, in the kubelet's or the node controller's own words.
package nodestatus

import (
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
)

// Ready is nil when the node's Ready condition is True, else an error saying what the
// condition says (its status, reason, message and the age of the last heartbeat).
func Ready(n *corev1.Node, now time.Time) error {
	for _, c := range n.Status.Conditions {
		if c.Type != corev1.NodeReady {
			continue
		}
		if c.Status == corev1.ConditionTrue {
			return nil
		}
		return fmt.Errorf("not Ready (Ready=%s %s: %s; last heartbeat %s ago)", c.Status, c.Reason, c.Message,
			now.Sub(c.LastHeartbeatTime.Time).Round(time.Second))
	}
	return fmt.Errorf("not Ready (no Ready condition yet)")
}

// IsReady says whether the node's Ready condition is True.
func IsReady(n *corev1.Node) bool { return Ready(n, time.Time{}) == nil }
