package teams

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"slices"

	admissionv1 "k8s.io/api/admission/v1"
	corev1 "k8s.io/api/core/v1"

	"github.com/clusterforge/clusterforge/components/ops/admission"
)

// Webhook adds the team tolerations to pods at creation: the toleration of the namespace's team
// (its NamespaceLabel), and for pods of the BorrowPriorityClass the toleration of every team's
// taint, so they run on idle owned nodes until the scheduler preempts them for the owner.
type Webhook struct {
	// NamespaceTeam is the team label of a namespace, from the controller's namespace cache; ""
	// for none.
	NamespaceTeam       func(namespace string) (string, error)
	BorrowPriorityClass string
}

// Review answers a pod CREATE with a JSON patch of the tolerations it lacks. It never refuses:
// an unlabelled namespace's pods just get no team toleration.
func (w *Webhook) Review(_ context.Context, req *admissionv1.AdmissionRequest) *admissionv1.AdmissionResponse {
	allow := &admissionv1.AdmissionResponse{UID: req.UID, Allowed: true}
	if req.Kind.Kind != "Pod" || req.Operation != admissionv1.Create || req.SubResource != "" {
		return allow
	}
	var pod corev1.Pod
	if err := json.Unmarshal(req.Object.Raw, &pod); err != nil {
		return admission.Deny(req, http.StatusBadRequest, fmt.Errorf("team quotas: decode the pod: %w", err))
	}
	team, err := w.NamespaceTeam(req.Namespace)
	if err != nil {
		return admission.Deny(req, http.StatusServiceUnavailable, fmt.Errorf("team quotas: namespace %s: %w", req.Namespace, err))
	}
	want := Tolerations(team, pod.Spec.PriorityClassName == w.BorrowPriorityClass)
	var add []corev1.Toleration
	for _, t := range want {
		if !slices.ContainsFunc(pod.Spec.Tolerations, func(have corev1.Toleration) bool { return have.MatchToleration(&t) }) {
			add = append(add, t)
		}
	}
	if len(add) == 0 {
		return allow
	}
	patch, err := json.Marshal(tolerationsPatch(pod.Spec.Tolerations == nil, add))
	if err != nil {
		return admission.Deny(req, http.StatusInternalServerError, err)
	}
	jsonPatch := admissionv1.PatchTypeJSONPatch
	allow.Patch, allow.PatchType = patch, &jsonPatch
	return allow
}

// Tolerations a pod of the team gets; a borrower tolerates every team's nodes.
func Tolerations(team string, borrower bool) []corev1.Toleration {
	var out []corev1.Toleration
	if team != "" {
		out = append(out, corev1.Toleration{Key: TaintKey, Operator: corev1.TolerationOpEqual, Value: team, Effect: corev1.TaintEffectNoSchedule})
	}
	if borrower {
		out = append(out, corev1.Toleration{Key: TaintKey, Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoSchedule})
	}
	return out
}

type patchOp struct {
	Op    string `json:"op"`
	Path  string `json:"path"`
	Value any    `json:"value"`
}

// tolerationsPatch appends the tolerations, creating the list when the pod has none.
func tolerationsPatch(none bool, add []corev1.Toleration) []patchOp {
	if none {
		return []patchOp{{Op: "add", Path: "/spec/tolerations", Value: add}}
	}
	ops := make([]patchOp, len(add))
	for i, t := range add {
		ops[i] = patchOp{Op: "add", Path: "/spec/tolerations/-", Value: t}
	}
	return ops
}

// ServeHTTP answers an AdmissionReview posted by the apiserver.
func (w *Webhook) ServeHTTP(rw http.ResponseWriter, r *http.Request) {
	admission.Serve("team quotas", w.Review, rw, r)
}
