// Package admission is the HTTP side the operations layer's webhooks share: decode the
// apiserver's AdmissionReview, answer it, and the shape of a refusal.
package admission

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"

	admissionv1 "k8s.io/api/admission/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// Review answers one admission request.
type Review func(ctx context.Context, req *admissionv1.AdmissionRequest) *admissionv1.AdmissionResponse

// Serve answers an AdmissionReview posted by the apiserver with review's response; name says
// whose webhook refused a malformed post.
func Serve(name string, review Review, rw http.ResponseWriter, r *http.Request) {
	var in admissionv1.AdmissionReview
	if err := json.NewDecoder(http.MaxBytesReader(rw, r.Body, 4<<20)).Decode(&in); err != nil || in.Request == nil {
		http.Error(rw, fmt.Sprintf("%s: want an AdmissionReview: %v", name, err), http.StatusBadRequest)
		return
	}
	in.Response = review(r.Context(), in.Request)
	in.Request = nil
	rw.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(rw).Encode(in)
}

// Deny refuses the request with code and err's text, which kubectl shows its user.
func Deny(req *admissionv1.AdmissionRequest, code int32, err error) *admissionv1.AdmissionResponse {
	return &admissionv1.AdmissionResponse{UID: req.UID, Allowed: false, Result: &metav1.Status{
		Status: metav1.StatusFailure, Code: code, Reason: metav1.StatusReasonForbidden, Message: err.Error()}}
}
