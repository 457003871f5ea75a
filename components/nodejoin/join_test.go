package nodejoin

import (
	"context"
	"strings"
	"testing"
	"time"

	certv1 "k8s.io/api/certificates/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	k8stypes "k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes/fake"
)

// A join reads its own request back by name until it is issued, and gives up on a denial or a
// request of the same name that is not its own.
func TestIssuedReadsTheRequestBackByName(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	t.Cleanup(cancel)
	request := &certv1.CertificateSigningRequest{ObjectMeta: metav1.ObjectMeta{Name: "node-join-n1-ab", UID: "one"}}
	for _, tc := range []struct {
		what   string
		status certv1.CertificateSigningRequestStatus
		uid    string
		cert   string
		err    string
	}{
		{what: "issued", status: certv1.CertificateSigningRequestStatus{Certificate: []byte("cert")}, uid: "one", cert: "cert"},
		{what: "denied", status: certv1.CertificateSigningRequestStatus{Conditions: []certv1.CertificateSigningRequestCondition{
			{Type: certv1.CertificateDenied, Message: "no Node"}}}, uid: "one", err: "Denied: no Node"},
		{what: "replaced", status: certv1.CertificateSigningRequestStatus{Certificate: []byte("cert")}, uid: "two", err: "replaced"},
	} {
		t.Run(tc.what, func(t *testing.T) {
			t.Parallel()
			stored := request.DeepCopy()
			stored.Status = certv1.CertificateSigningRequestStatus{}
			client := fake.NewClientset(stored)
			// Pending at first: the verdict comes after the join has read it once.
			go func() {
				time.Sleep(pollEvery / 2)
				stored.UID, stored.Status = k8stypes.UID(tc.uid), tc.status
				if _, err := client.CertificatesV1().CertificateSigningRequests().UpdateStatus(ctx, stored, metav1.UpdateOptions{}); err != nil {
					t.Error(err)
				}
			}()
			cert, err := issued(ctx, client, request)
			if string(cert) != tc.cert || (tc.err == "") != (err == nil) || err != nil && !strings.Contains(err.Error(), tc.err) {
				t.Errorf("%q, %v; want %q, %q", cert, err, tc.cert, tc.err)
			}
		})
	}
}
