package controlplane

import (
	"context"
	"errors"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/clusterforge/clusterforge/components/roll"
	"github.com/clusterforge/clusterforge/components/wellknown"
	"github.com/clusterforge/clusterforge/test/e2e/framework"
)

// The cluster's mutation lease, on the real apiservers: a second change is refused while the
// first holds it, naming the holder; released, it is the next one's; a holder that stopped
// renewing it two minutes ago loses it to the next.
func MutationLeaseIsOneAtATime(t *testing.T) {
	framework.NeedRehearsal(t)
	ctx := context.Background()
	cs := framework.Clientset(t)
	_, releaseFirst, err := roll.Lock(ctx, cs, "roll by alice")
	if err != nil {
		t.Fatal(err)
	}
	var locked *roll.ErrLocked
	if _, _, err := roll.Lock(ctx, cs, "roll by bob"); !errors.As(err, &locked) || locked.Holder != "roll by alice" || time.Since(locked.Since) > time.Minute {
		t.Fatalf("a second roll while the first runs: %v, want a refusal naming the first and its start", err)
	}
	releaseFirst()
	_, releaseSecond, err := roll.Lock(ctx, cs, "roll by bob")
	if err != nil {
		t.Fatalf("after the first let go: %v", err)
	}
	releaseSecond()

	// A holder whose process died: its lease was last renewed three minutes ago.
	lease, err := cs.CoordinationV1().Leases(metav1.NamespaceSystem).Get(ctx, wellknown.MutationLease, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	gone, stale := "roll by carol", metav1.NewMicroTime(time.Now().Add(-3*time.Minute))
	lease.Spec.HolderIdentity, lease.Spec.RenewTime, lease.Spec.AcquireTime = &gone, &stale, &stale
	if _, err := cs.CoordinationV1().Leases(metav1.NamespaceSystem).Update(ctx, lease, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	held, release, err := roll.Lock(ctx, cs, "roll by dave")
	if err != nil {
		t.Fatalf("a lease its holder stopped renewing was not taken over: %v", err)
	}
	release()
	if held.Err() == nil {
		t.Error("the lease's context outlived its release")
	}
}
