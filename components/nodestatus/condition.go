package nodestatus

import (
	"context"
	"encoding/json"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
)

// SetCondition writes one condition of the node's status with a strategic merge patch, which
// merges conditions by type: the kubelet's and other agents' conditions are left as they are.
// The heartbeat is now; the transition time too unless the caller set one.
func SetCondition(ctx context.Context, client kubernetes.Interface, node string, c corev1.NodeCondition) error {
	now := metav1.Now()
	c.LastHeartbeatTime = now
	if c.LastTransitionTime.IsZero() {
		c.LastTransitionTime = now
	}
	patch, err := json.Marshal(map[string]any{"status": map[string]any{"conditions": []corev1.NodeCondition{c}}})
	if err != nil {
		return err
	}
	_, err = client.CoreV1().Nodes().Patch(ctx, node, types.StrategicMergePatchType, patch, metav1.PatchOptions{}, "status")
	return err
}

// Condition is the node's condition of type t, and whether it has one.
func Condition(n *corev1.Node, t corev1.NodeConditionType) (corev1.NodeCondition, bool) {
	for _, c := range n.Status.Conditions {
		if c.Type == t {
			return c, true
		}
	}
	return corev1.NodeCondition{Type: t}, false
}
