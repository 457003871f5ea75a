package brake

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"time"

	admissionv1 "k8s.io/api/admission/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/tools/cache"

	"github.com/clusterforge/clusterforge/components/ops/admission"
	"github.com/clusterforge/clusterforge/components/wellknown"
)

// Ledger keeps the removals the brake admitted, shared by every replica of the webhook: a
// replica's memory would let two replicas each admit the last slot.
type Ledger interface {
	// Load returns the recorded removals and the version they were read at.
	Load(ctx context.Context) ([]Removal, string, error)
	// Save replaces the record if it is still at version, else returns ErrConflict.
	Save(ctx context.Context, version string, removals []Removal) error
}

// ErrConflict: another writer saved the ledger since it was loaded.
var ErrConflict = errors.New("brake: the ledger changed since it was read")

// Webhook answers the apiserver's admission reviews of Nodes.
type Webhook struct {
	Policy Policy
	Ledger Ledger
	// Fleet returns the nodes present now (from the controller's shared informer cache).
	Fleet func() Fleet
	// Refused is told of each refusal (an Event, a metric); may be nil.
	Refused func(*Refusal)
	Now     func() time.Time
}

// Review admits a request that removes no node, or removes one within the brake's budget and
// records it; it refuses the rest with the brake's reason. A removal recorded within the window
// (a retried review, the deletion of a node marked earlier) is admitted again without a write:
// its slot is taken from its first record, and concurrent deletions of marked nodes must not race
// for the ledger. A ledger it cannot read or write refuses too: a brake that fails open is no
// brake.
func (w *Webhook) Review(ctx context.Context, req *admissionv1.AdmissionRequest) *admissionv1.AdmissionResponse {
	allow := &admissionv1.AdmissionResponse{UID: req.UID, Allowed: true}
	now := w.Now()
	removal, isRemoval, err := RemovalOf(req, now)
	if err != nil {
		return admission.Deny(req, http.StatusBadRequest, err)
	}
	if !isRemoval {
		return allow
	}
	for range 5 {
		recent, version, err := w.Ledger.Load(ctx)
		if err != nil {
			return admission.Deny(req, http.StatusServiceUnavailable, fmt.Errorf("scale-down brake: read the ledger: %w", err))
		}
		if slices.ContainsFunc(recent, func(r Removal) bool { return r.Node == removal.Node && now.Sub(r.At) < w.Policy.Window }) {
			return allow
		}
		if err := w.Policy.Allow(now, recent, removal, w.Fleet()); err != nil {
			var refusal *Refusal
			if errors.As(err, &refusal) && w.Refused != nil {
				w.Refused(refusal)
			}
			return admission.Deny(req, http.StatusForbidden, err)
		}
		if req.DryRun != nil && *req.DryRun {
			return allow // a dry run removes nothing, so it records nothing
		}
		err = w.Ledger.Save(ctx, version, append(w.Policy.Prune(now, recent), removal))
		if err == nil {
			return allow
		}
		if !errors.Is(err, ErrConflict) {
			return admission.Deny(req, http.StatusServiceUnavailable, fmt.Errorf("scale-down brake: record the removal: %w", err))
		}
	}
	return admission.Deny(req, http.StatusServiceUnavailable, fmt.Errorf("scale-down brake: the ledger kept changing; retry"))
}

// ServeHTTP answers an AdmissionReview posted by the apiserver.
func (w *Webhook) ServeHTTP(rw http.ResponseWriter, r *http.Request) {
	admission.Serve("scale-down brake", w.Review, rw, r)
}

// FleetOf reads the nodes from a node informer's store: each node's pool label and removal taints.
func FleetOf(nodes cache.Store) func() Fleet {
	return func() Fleet {
		f := Fleet{}
		for _, obj := range nodes.List() {
			if n, ok := obj.(*corev1.Node); ok {
				f[n.Name] = Present{Pool: n.Labels[wellknown.PoolLabel], Marked: markedForRemoval(n)}
			}
		}
		return f
	}
}
