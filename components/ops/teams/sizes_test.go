package teams

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	admissionv1 "k8s.io/api/admission/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"

	"github.com/clusterforge/clusterforge/components/spec"
)

func TestSizesRefuseWhatOutgrowsItsKind(t *testing.T) {
	limits := spec.Teams{MaxObjectBytes: 100, MaxDataObjectBytes: 1000}
	hook := NewSizes(limits.ObjectBytes, 1)
	review := func(op admissionv1.Operation, resource string, size, oldSize int) *admissionv1.AdmissionResponse {
		return hook.Review(context.Background(), &admissionv1.AdmissionRequest{
			UID: "u", Operation: op, Kind: metav1.GroupVersionKind{Kind: "Thing"}, Resource: metav1.GroupVersionResource{Resource: resource},
			Object: runtime.RawExtension{Raw: []byte(strings.Repeat("x", size))}, OldObject: runtime.RawExtension{Raw: []byte(strings.Repeat("x", oldSize))}})
	}
	for _, tc := range []struct {
		what          string
		op            admissionv1.Operation
		resource      string
		size, oldSize int
		allowed       bool
	}{
		{"a pod at its limit", admissionv1.Create, "pods", 100, 0, true},
		{"a pod past it", admissionv1.Create, "pods", 101, 0, false},
		{"a ConfigMap past a pod's limit", admissionv1.Create, "configmaps", 900, 0, true},
		{"a Secret past its own", admissionv1.Create, "secrets", 1001, 0, false},
		{"a Job grown past it", admissionv1.Update, "jobs", 150, 120, false},
		{"an old oversized Job that shrinks", admissionv1.Update, "jobs", 150, 200, true},
	} {
		got := review(tc.op, tc.resource, tc.size, tc.oldSize)
		if got.Allowed != tc.allowed || got.UID != "u" {
			t.Errorf("%s: allowed %v, want %v (%v)", tc.what, got.Allowed, tc.allowed, got.Result)
		}
		if !got.Allowed && (got.Result.Code != 413 || !strings.Contains(got.Result.Message, "maxObjectBytes")) {
			t.Errorf("%s: refusal %v should say which setting holds it", tc.what, got.Result)
		}
	}
}

// Past its bound the webhook reads no more reviews: a caller waits for a turn, and is answered 503
// once it stops waiting.
func TestSizesBoundTheReviewsReadAtOnce(t *testing.T) {
	hook := NewSizes(func(string) int64 { return 1 }, 1)
	hook.inFlight <- struct{}{} // one review being read
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	rw := httptest.NewRecorder()
	hook.ServeHTTP(rw, httptest.NewRequest(http.MethodPost, "/", strings.NewReader("{}")).WithContext(ctx))
	if rw.Code != http.StatusServiceUnavailable {
		t.Errorf("a review past the bound: HTTP %d, want 503", rw.Code)
	}
	<-hook.inFlight
	rw = httptest.NewRecorder()
	hook.ServeHTTP(rw, httptest.NewRequest(http.MethodPost, "/", strings.NewReader(`{"request":{"uid":"u","object":{}}}`)))
	if rw.Code != http.StatusOK || len(hook.inFlight) != 0 {
		t.Errorf("a review within the bound: HTTP %d, %d still in flight", rw.Code, len(hook.inFlight))
	}
}
