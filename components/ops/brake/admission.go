package brake

import (
	"encoding/json"
	"fmt"
	"slices"
	"time"

	"github.com/clusterforge/clusterforge/components/wellknown"
	admissionv1 "k8s.io/api/admission/v1"
	corev1 "k8s.io/api/core/v1"
)

// Taints that say a node is on its way out: cluster-autoscaler sets its own before it deletes the
// VM; the remediation controller sets ReplaceTaint before it drains a node for replacement.
const (
	AutoscalerDeletionTaint = wellknown.AutoscalerDeletionTaint
	ReplaceTaint            = wellknown.ReplaceTaint
)

// RemovalOf reads an admission request on a Node: a DELETE, or an UPDATE that adds a removal
// taint, is a removal (by the requesting user); anything else is not.
func RemovalOf(req *admissionv1.AdmissionRequest, now time.Time) (Removal, bool, error) {
	if req.Kind.Kind != "Node" || req.SubResource != "" {
		return Removal{}, false, nil
	}
	var old, next corev1.Node
	decode := func(raw []byte, into *corev1.Node) error {
		if len(raw) == 0 {
			return nil
		}
		if err := json.Unmarshal(raw, into); err != nil {
			return fmt.Errorf("brake: decode node %s: %w", req.Name, err)
		}
		return nil
	}
	if err := decode(req.OldObject.Raw, &old); err != nil {
		return Removal{}, false, err
	}
	if err := decode(req.Object.Raw, &next); err != nil {
		return Removal{}, false, err
	}
	removal := Removal{Node: req.Name, Pool: old.Labels[wellknown.PoolLabel], By: req.UserInfo.Username, At: now}
	switch req.Operation {
	case admissionv1.Delete:
		return removal, true, nil
	case admissionv1.Update:
		return removal, !markedForRemoval(&old) && markedForRemoval(&next), nil
	}
	return Removal{}, false, nil
}

// markedForRemoval: the node carries a removal taint.
func markedForRemoval(n *corev1.Node) bool {
	return slices.ContainsFunc(n.Spec.Taints, func(t corev1.Taint) bool {
		return t.Key == AutoscalerDeletionTaint || t.Key == ReplaceTaint
	})
}
