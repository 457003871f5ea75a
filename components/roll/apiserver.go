package roll

import (
	"context"
	"errors"
	"fmt"

	"golang.org/x/mod/semver"
)

// leases are the kube-system leases the apiserver machines' components hold.
var leases = []string{"kube-controller-manager", "kube-scheduler"}

// replaceAPIServer takes one apiserver machine out of the load balancer, replaces it, and waits
// until it serves the desired version back in rotation and every lease is held again.
func (r *Roller) replaceAPIServer(ctx context.Context, name string) error {
	held := map[string]string{}
	for _, lease := range leases {
		held[lease], _ = r.Target.LeaseMachine(ctx, lease)
	}
	if err := r.Target.TakeOutOfRotation(ctx, name); err != nil {
		return err
	}
	if err := poll(ctx, name+" to leave the load balancer", func() error {
		in, err := r.Target.InRotation(ctx, name)
		if err == nil && in {
			err = errors.New("still in rotation")
		}
		return err
	}); err != nil {
		return err
	}
	r.logf("%s: out of the load balancer's rotation", name)
	if err := r.Target.Replace(ctx, name); err != nil {
		return fmt.Errorf("replace %s: %w", name, err)
	}
	want := r.Desired.Versions.Kubernetes
	if err := poll(ctx, name+" to serve "+want+" in rotation", func() error {
		v, err := r.Target.APIServerVersion(ctx, name)
		if err != nil {
			return err
		}
		if semver.Compare(v, want) != 0 {
			return fmt.Errorf("serves %s", v)
		}
		in, err := r.Target.InRotation(ctx, name)
		if err == nil && !in {
			err = errors.New("not back in rotation")
		}
		return err
	}); err != nil {
		return err
	}
	for _, lease := range leases {
		if err := poll(ctx, lease+" lease to be held", func() error {
			_, err := r.Target.LeaseMachine(ctx, lease)
			return err
		}); err != nil {
			return err
		}
		if now, _ := r.Target.LeaseMachine(ctx, lease); held[lease] == name && now != name {
			r.logf("%s: lease %s handed over to %s", name, lease, now)
		}
	}
	r.logf("%s: serves %s in rotation", name, want)
	return nil
}
