package brake

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/clusterforge/clusterforge/components/wellknown"
	admissionv1 "k8s.io/api/admission/v1"
	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
)

func TestRemovalOfReadsDeletesAndRemovalTaints(t *testing.T) {
	node := func(taints ...string) runtime.RawExtension {
		n := corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "cf-dev-cpu000003", Labels: map[string]string{wellknown.PoolLabel: "cpu"}}}
		for _, k := range taints {
			n.Spec.Taints = append(n.Spec.Taints, corev1.Taint{Key: k, Effect: corev1.TaintEffectNoSchedule})
		}
		raw, err := json.Marshal(n)
		if err != nil {
			t.Fatal(err)
		}
		return runtime.RawExtension{Raw: raw}
	}
	request := func(op admissionv1.Operation, sub string, old, next runtime.RawExtension) *admissionv1.AdmissionRequest {
		return &admissionv1.AdmissionRequest{
			Kind: metav1.GroupVersionKind{Version: "v1", Kind: "Node"}, Name: "cf-dev-cpu000003", Operation: op, SubResource: sub,
			OldObject: old, Object: next, UserInfo: authenticationv1.UserInfo{Username: "system:serviceaccount:kube-system:cluster-autoscaler"},
		}
	}
	none := runtime.RawExtension{}
	for _, tc := range []struct {
		name string
		req  *admissionv1.AdmissionRequest
		want bool
	}{
		{"delete", request(admissionv1.Delete, "", node(), none), true},
		{"the autoscaler's taint added", request(admissionv1.Update, "", node(), node(AutoscalerDeletionTaint)), true},
		{"the replace taint added", request(admissionv1.Update, "", node("other"), node("other", ReplaceTaint)), true},
		{"already marked", request(admissionv1.Update, "", node(AutoscalerDeletionTaint), node(AutoscalerDeletionTaint, "other")), false},
		{"the mark lifted", request(admissionv1.Update, "", node(AutoscalerDeletionTaint), node()), false},
		{"a cordon", request(admissionv1.Update, "", node(), node(corev1.TaintNodeUnschedulable)), false},
		{"status", request(admissionv1.Update, "status", node(), node(AutoscalerDeletionTaint)), false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			now := time.Now()
			r, removal, err := RemovalOf(tc.req, now)
			if err != nil {
				t.Fatal(err)
			}
			if removal != tc.want {
				t.Fatalf("removal %v, want %v", removal, tc.want)
			}
			if removal && (r.Node != "cf-dev-cpu000003" || r.Pool != "cpu" || r.By != tc.req.UserInfo.Username || !r.At.Equal(now)) {
				t.Errorf("removal %+v", r)
			}
		})
	}
	if _, _, err := RemovalOf(request(admissionv1.Update, "", runtime.RawExtension{Raw: []byte("{")}, node()), time.Now()); err == nil {
		t.Error("a request that does not decode passed")
	}
}
