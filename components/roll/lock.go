package roll

import (
	"context"
	"fmt"
	"os"
	"os/user"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/clusterforge/clusterforge/components/wellknown"
)

// The mutation lease's timing: renewed every half minute, taken over only when its holder has not
// renewed it for two minutes (its process is gone); a holder that could not renew it for 75 s
// stops first, so that it has stopped before anyone may take over.
const (
	lockDuration = 2 * time.Minute
	lockRenew    = 30 * time.Second
	lockDeadline = 75 * time.Second
)

// Holder names this process for the mutation lease: what it does, who runs it, from where.
func Holder(what string) string {
	name := "unknown"
	if u, err := user.Current(); err == nil {
		name = u.Username
	}
	host, _ := os.Hostname()
	return fmt.Sprintf("%s by %s@%s (pid %d)", what, name, host, os.Getpid())
}

// ErrLocked is returned when another holder has the cluster's mutation lease.
type ErrLocked struct {
	Holder  string
	Since   time.Time
	Renewed time.Time
	// Read is when the lease was read: the message's "renewed ago" counts to then, however late
	// it is printed.
	Read time.Time
}

func (e *ErrLocked) Error() string {
	return fmt.Sprintf("the cluster is being changed: %q holds the lease kube-system/%s since %s (renewed %s before it was read); wait for it to end, or, if its operator left, see docs/runbooks/roll.md (a roll whose operator left)",
		e.Holder, wellknown.MutationLease, e.Since.UTC().Format(time.RFC3339), e.Read.Sub(e.Renewed).Round(time.Second))
}

// Lock takes the cluster's mutation lease for holder and keeps it: the context returned ends
// when the lease is lost (another took it over after this process stopped renewing), and
// release gives it back. A lease its holder stopped renewing lockDuration ago is taken over.
func Lock(ctx context.Context, cs kubernetes.Interface, holder string) (context.Context, func(), error) {
	leases := cs.CoordinationV1().Leases(metav1.NamespaceSystem)
	now := metav1.NewMicroTime(time.Now())
	seconds := int32(lockDuration.Seconds())
	spec := coordinationv1.LeaseSpec{HolderIdentity: &holder, LeaseDurationSeconds: &seconds, AcquireTime: &now, RenewTime: &now}
	lease, err := leases.Create(ctx, &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: wellknown.MutationLease}, Spec: spec}, metav1.CreateOptions{})
	if apierrors.IsAlreadyExists(err) {
		if lease, err = leases.Get(ctx, wellknown.MutationLease, metav1.GetOptions{}); err != nil {
			return nil, nil, err
		}
		if h := lease.Spec.HolderIdentity; h != nil && *h != "" && lease.Spec.RenewTime != nil && time.Since(lease.Spec.RenewTime.Time) < lockDuration {
			e := &ErrLocked{Holder: *h, Renewed: lease.Spec.RenewTime.Time, Read: time.Now()}
			if lease.Spec.AcquireTime != nil {
				e.Since = lease.Spec.AcquireTime.Time
			}
			return nil, nil, e
		}
		lease.Spec = spec
		// The resource version makes two takeovers at once race: one update fails.
		lease, err = leases.Update(ctx, lease, metav1.UpdateOptions{})
	}
	if err != nil {
		return nil, nil, fmt.Errorf("take the lease kube-system/%s: %w", wellknown.MutationLease, err)
	}
	held, lost := context.WithCancelCause(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		last := time.Now()
		for {
			select {
			case <-held.Done():
				return
			case <-time.After(lockRenew / 3):
			}
			if time.Since(last) < lockRenew {
				continue
			}
			renewed := metav1.NewMicroTime(time.Now())
			lease.Spec.RenewTime = &renewed
			rctx, cancel := context.WithTimeout(held, lockRenew/3)
			next, err := leases.Update(rctx, lease, metav1.UpdateOptions{})
			cancel()
			switch {
			case apierrors.IsConflict(err) || apierrors.IsNotFound(err):
				lost(fmt.Errorf("lost the lease kube-system/%s: %w", wellknown.MutationLease, err))
				return
			case err == nil:
				lease, last = next, time.Now()
			case time.Since(last) > lockDeadline:
				lost(fmt.Errorf("could not renew the lease kube-system/%s for %s, so another may take it over soon: %w", wellknown.MutationLease, lockDeadline, err))
				return
			} // another error (an apiserver restart) is retried shortly
		}
	}()
	release := func() {
		lost(nil)
		<-done
		lease.Spec.HolderIdentity, lease.Spec.RenewTime = nil, nil
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), lockRenew)
		defer cancel()
		_, _ = leases.Update(rctx, lease, metav1.UpdateOptions{}) // a lease left held lapses in lockDuration
	}
	return held, release, nil
}
