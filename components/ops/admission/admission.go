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

// From serves next only to a caller whose client certificate the server's TLS configuration
// verified and whose common name is user: the apiserver (pki.APIServerWebhookUser). A review
// posted by anyone else, a pod say, would spend the brake's budget or learn the policy; it gets 403.
func From(user string, next http.Handler) http.Handler {
	return http.HandlerFunc(func(rw http.ResponseWriter, r *http.Request) {
		if r.TLS == nil || len(r.TLS.VerifiedChains) == 0 || r.TLS.VerifiedChains[0][0].Subject.CommonName != user {
			http.Error(rw, "admission reviews are taken from the apiservers only: present their webhook client certificate", http.StatusForbidden)
			return
		}
		next.ServeHTTP(rw, r)
	})
}

// Deny refuses the request with code and err's text, which kubectl shows its user.
func Deny(req *admissionv1.AdmissionRequest, code int32, err error) *admissionv1.AdmissionResponse {
	return &admissionv1.AdmissionResponse{UID: req.UID, Allowed: false, Result: &metav1.Status{
		Status: metav1.StatusFailure, Code: code, Reason: metav1.StatusReasonForbidden, Message: err.Error()}}
}
