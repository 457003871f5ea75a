package roll

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"golang.org/x/mod/semver"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/clusterforge/clusterforge/components/etcdbackup"
	"github.com/clusterforge/clusterforge/components/nodestatus"
	"github.com/clusterforge/clusterforge/components/spec"
)

// gate runs before a stage of role ("" after the last): the cluster validated twice in a row,
// ValidationPause apart, within ValidationTimeout, then what the role asks for: a fresh verified
// snapshot before the main etcd is touched, apiservers at least as new as the kubelets before a
// pool is.
func (r *Roller) gate(ctx context.Context, role string) error {
	if err := r.validateTwice(ctx, r.validate); err != nil {
		return fmt.Errorf("gate before %s: %w", stageName(role), err)
	}
	switch {
	case role == spec.RoleEtcdMain:
		if err := r.freshBackup(ctx); err != nil {
			return fmt.Errorf("gate before %s: %w", role, err)
		}
	case strings.HasPrefix(role, "worker-"):
		if err := r.kubeletSkew(ctx); err != nil {
			return fmt.Errorf("gate before %s: %w", role, err)
		}
	}
	r.logf("gate passed before %s", stageName(role))
	return nil
}

// validateTwice passes once validate has passed twice in a row, ValidationPause apart, as kops'
// rolling update validates: a blip (an apiserver's probe timing out on a busy host) is waited
// out, and a cluster still failing after ValidationTimeout is refused with its last problem.
func (r *Roller) validateTwice(ctx context.Context, validate func(context.Context) error) error {
	deadline := time.Now().Add(r.ValidationTimeout)
	passes := 0
	for {
		err := validate(ctx)
		if err == nil {
			passes++
		} else {
			passes = 0
			if !time.Now().Before(deadline) {
				return fmt.Errorf("the cluster did not validate within %s: %w", r.ValidationTimeout, err)
			}
			r.logf("cluster not valid yet, validating again in %s: %v", r.ValidationPause, err)
		}
		if passes == 2 {
			return nil
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(r.ValidationPause):
		}
	}
}

func stageName(role string) string {
	if role == "" {
		return "the end of the roll"
	}
	return role
}

// validate is kops' cluster validation, as this roll needs it: the API ready through the load
// balancer, every apiserver in rotation, the nodes Ready but as many as the cluster tolerates,
// both etcd clusters whole.
func (r *Roller) validate(ctx context.Context) error {
	var problems []error
	cs, err := r.Target.Clientset()
	if err != nil {
		return err
	}
	if body, err := cs.Discovery().RESTClient().Get().AbsPath("/readyz").DoRaw(ctx); err != nil {
		problems = append(problems, fmt.Errorf("the API through the load balancer is not ready: %v %s", err, body))
	}
	inv, err := r.Target.Inventory(ctx)
	if err != nil {
		return err
	}
	for _, name := range inv[spec.RoleAPIServer] {
		if in, err := r.Target.InRotation(ctx, name); err != nil || !in {
			problems = append(problems, fmt.Errorf("apiserver %s is out of the load balancer's rotation (%v)", name, err))
		}
	}
	nodes, err := cs.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
	if err != nil {
		problems = append(problems, fmt.Errorf("list nodes: %v", err))
	} else {
		problems = append(problems, r.unready(nodes.Items, time.Now())...)
	}
	for _, role := range []string{spec.RoleEtcdEvents, spec.RoleEtcdMain} {
		problems = append(problems, r.etcdProblems(ctx, role)...)
	}
	return errors.Join(problems...)
}

// unready judges the nodes' readiness by the share cluster-autoscaler tolerates
// (spec.Autoscaler.UnreadyTolerated): at 10,000 nodes a few are always NotReady, and one of them must not hold up every roll, a
// security roll among them. Past the tolerance, every unready node is a problem; within it, each
// is logged.
func (r *Roller) unready(nodes []corev1.Node, now time.Time) []error {
	var unready []error
	for _, n := range nodes {
		if err := nodestatus.Ready(&n, now); err != nil {
			unready = append(unready, fmt.Errorf("node %s is %v", n.Name, err))
		}
	}
	tolerated := r.Desired.Autoscaler.UnreadyTolerated(len(nodes))
	if len(unready) > tolerated {
		return append([]error{fmt.Errorf("%d of %d nodes are unready, more than the %d the cluster tolerates (autoscaler.maxUnreadyPercentage)",
			len(unready), len(nodes), tolerated)}, unready...)
	}
	for _, err := range unready {
		r.logf("tolerated (%d of %d unready): %v", len(unready), tolerated, err)
	}
	return nil
}

func (r *Roller) etcdProblems(ctx context.Context, role string) []error {
	cli, err := r.Target.EtcdClient(role)
	if err != nil {
		return []error{fmt.Errorf("%s: %v", role, err)}
	}
	defer cli.Close()
	var out []error
	for _, p := range etcdbackup.MemberProblems(ctx, cli) {
		out = append(out, fmt.Errorf("%s: %v", role, p))
	}
	return out
}

// freshBackup passes the backup gate, taking a snapshot first when the newest verified one is
// older than the backup interval.
func (r *Roller) freshBackup(ctx context.Context) error {
	if r.Target.FreshBackup(ctx) == nil {
		return nil
	}
	r.logf("taking a verified snapshot of %s first", spec.RoleEtcdMain)
	if err := r.Target.BackupNow(ctx); err != nil {
		return fmt.Errorf("snapshot before the roll: %w", err)
	}
	return r.Target.FreshBackup(ctx)
}

// kubeletSkew refuses to roll kubelets to a version newer than any apiserver serves: a kubelet
// may not be newer than the apiserver it talks to (version skew policy).
func (r *Roller) kubeletSkew(ctx context.Context) error {
	inv, err := r.Target.Inventory(ctx)
	if err != nil {
		return err
	}
	want := semver.MajorMinor(r.Desired.Versions.Kubelet)
	for _, name := range inv[spec.RoleAPIServer] {
		v, err := r.Target.APIServerVersion(ctx, name)
		if err != nil {
			return fmt.Errorf("apiserver %s: %v", name, err)
		}
		if semver.Compare(semver.MajorMinor(v), want) < 0 {
			return fmt.Errorf("apiserver %s serves %s, older than the kubelets' %s would be: roll the apiservers first", name, v, r.Desired.Versions.Kubelet)
		}
	}
	return nil
}

// permanent is an error poll does not retry.
type permanent struct{ error }

// poll calls check every half second until it passes, fails for good, or ctx ends.
func poll(ctx context.Context, what string, check func() error) error {
	for {
		err := check()
		var stop permanent
		if err == nil {
			return nil
		} else if errors.As(err, &stop) {
			return fmt.Errorf("%s: %w", what, stop.error)
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%s: %w (last: %v)", what, ctx.Err(), err)
		case <-time.After(500 * time.Millisecond):
		}
	}
}
