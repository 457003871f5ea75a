package teams

import (
	"context"
	"fmt"
	"net/http"

	admissionv1 "k8s.io/api/admission/v1"

	"github.com/clusterforge/clusterforge/components/ops/admission"
)

// Sizes refuses an object a team writes into its namespace that is larger, as JSON, than its
// kind may be: with the quota's object counts it bounds how much of etcd-main a team holds. An
// object already over its limit (written before the limit was lowered) may still shrink.
type Sizes struct {
	// Largest is the most bytes an object of a resource (its plural name) may take.
	Largest func(resource string) int64
	// inFlight bounds the reviews read at once, each up to admission.Serve's 4 MiB.
	inFlight chan struct{}
}

// NewSizes judges by largest, at most maxInFlight reviews at once: a team writing at its share of
// the API waits for a turn, or is refused when its apiserver stops waiting, rather than the
// replica running out of memory and the webhooks it serves (the brake among them) with it.
func NewSizes(largest func(resource string) int64, maxInFlight int) *Sizes {
	return &Sizes{Largest: largest, inFlight: make(chan struct{}, maxInFlight)}
}

// MaxSizeReviews is how many reviews clusterforge-ops reads at once: 64 of at most 4 MiB, well
// within its memory limit.
const MaxSizeReviews = 64

// Review answers a CREATE or UPDATE.
func (s *Sizes) Review(_ context.Context, req *admissionv1.AdmissionRequest) *admissionv1.AdmissionResponse {
	size, limit := int64(len(req.Object.Raw)), s.Largest(req.Resource.Resource)
	if size <= limit || (req.Operation == admissionv1.Update && size <= int64(len(req.OldObject.Raw))) {
		return &admissionv1.AdmissionResponse{UID: req.UID, Allowed: true}
	}
	return admission.Deny(req, http.StatusRequestEntityTooLarge, fmt.Errorf(
		"team objects: this %s takes %d bytes as JSON; in a team namespace a %s takes at most %d (the stack's teams.maxObjectBytes and maxDataObjectBytes)",
		req.Kind.Kind, size, req.Kind.Kind, limit))
}

// ServeHTTP answers an AdmissionReview posted by the apiserver.
func (s *Sizes) ServeHTTP(rw http.ResponseWriter, r *http.Request) {
	select {
	case s.inFlight <- struct{}{}:
		defer func() { <-s.inFlight }()
		admission.Serve("team objects", s.Review, rw, r)
	case <-r.Context().Done():
		http.Error(rw, "team objects: too many reviews at once", http.StatusServiceUnavailable)
	}
}
