package processes

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"slices"
	"syscall"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/clusterforge/clusterforge/components/change"
	"github.com/clusterforge/clusterforge/components/pki"
	"github.com/clusterforge/clusterforge/components/roll"
	"github.com/clusterforge/clusterforge/components/spec"
	"github.com/clusterforge/clusterforge/test/machines"
)

// RollTarget is a running rehearsal as a roll acts on it (roll.Target). A replaced machine is
// stopped, its local disk emptied, and booted from the desired spec's rendering with the
// desired versions' binaries, as a new Azure VM boots from new user-data and a new image; a
// replaced worker is a KWOK node registered again with the new kubelet version.
type RollTarget struct {
	*Rehearsal
	desired *Layout
}

var _ roll.Target = (*RollTarget)(nil)

// RollTo prepares a roll of the running rehearsal to desired; renew re-issues every leaf
// certificate from the same authorities.
func (r *Rehearsal) RollTo(desired *spec.Cluster, renew bool) (*RollTarget, error) {
	d, err := NewLayout(desired, r.Options)
	if err != nil {
		return nil, err
	}
	if d.fresh {
		return nil, errors.New("the desired spec certifies other names or addresses than the rehearsal runs: that is a new cluster, not a roll")
	}
	if renew {
		if d.Bundle, err = pki.Renew(r.Bundle, pki.Authorities(d.Cluster), loopbackProfiles(d.Cluster, d.apiserverIPs())); err != nil {
			return nil, err
		}
		if err := d.renderInstances(); err != nil {
			return nil, err
		}
	}
	return &RollTarget{Rehearsal: r, desired: d}, nil
}

// Roll converges the running rehearsal on desired, machine by machine, resuming an interrupted
// roll toward the same spec; renew also renews every leaf certificate.
func (r *Rehearsal) Roll(ctx context.Context, desired *spec.Cluster, renew bool, progress io.Writer) ([]roll.Result, error) {
	applied, err := r.Applied()
	if err != nil {
		return nil, fmt.Errorf("this rehearsal has no record of what it runs (%w): it predates `make roll`; rehearse it again", err)
	}
	var extra []change.Change
	if renew {
		extra = append(extra, change.Renewal(desired, "asked for"))
	} else if machines, err := roll.Report(ctx, r.Layout, desired); err == nil {
		// A roll renews leaves that expire within roll.RenewBefore, whatever else it changes.
		if due, ok := roll.Due(machines, desired, time.Now()); ok {
			extra, renew = append(extra, due), true
		}
	}
	target, err := r.RollTo(desired, renew)
	if err != nil {
		return nil, err
	}
	roller := &roll.Roller{Target: target, Applied: applied, Desired: desired, Journal: r.RollJournal(), Progress: progress, Extra: extra}
	return roller.Run(ctx)
}

// apiserverStopGrace covers the shutdown delay and the drain of requests in flight after it.
const apiserverStopGrace = (spec.APIServerShutdownDelaySeconds + 30) * time.Second

// TakeOutOfRotation stops kube-apiserver cleanly, as systemd does when the VM shuts down: it
// fails /readyz at once and serves on through its shutdown delay, so the probe takes it out.
func (t *RollTarget) TakeOutOfRotation(_ context.Context, name string) error {
	p := t.Proc(name, APIServerProcess)
	if p == nil || !p.Alive() {
		return fmt.Errorf("%s runs no kube-apiserver", name)
	}
	go func() { _ = p.Stop(syscall.SIGTERM, apiserverStopGrace) }()
	return nil
}

// StopEtcd stops the member's etcd with SIGTERM, as systemctl stop does.
func (t *RollTarget) StopEtcd(_ context.Context, name string) error {
	return t.Stop(name, "etcd", syscall.SIGTERM)
}

// Replace replaces a machine with one built from the desired spec.
func (t *RollTarget) Replace(ctx context.Context, name string) error {
	next, err := t.desired.Instance(name)
	if err != nil {
		return t.replaceNode(ctx, name)
	}
	if p := t.Proc(name, APIServerProcess); p != nil && p.Stopping() && !p.WaitExit(apiserverStopGrace) {
		return fmt.Errorf("%s: kube-apiserver did not stop within %s", name, apiserverStopGrace)
	}
	if err := t.StopMachine(ctx, name, false); err != nil {
		return err
	}
	if err := t.WipeLocalDisk(name); err != nil {
		return err
	}
	i := slices.IndexFunc(t.Instances, func(in machines.Instance) bool { return in.Name == name })
	t.Instances[i] = next
	if err := t.materialize(next); err != nil {
		return err
	}
	return t.Boot(ctx, name)
}

// replaceNode registers a KWOK node again as a new VM's kubelet would, on the desired version.
func (t *RollTarget) replaceNode(ctx context.Context, name string) error {
	nodes, err := t.desired.Nodes()
	if err != nil {
		return err
	}
	i := slices.IndexFunc(nodes, func(n corev1.Node) bool { return n.Name == name })
	if i < 0 {
		return fmt.Errorf("rehearsal: no machine or node %q", name)
	}
	cs, err := t.Clientset()
	if err != nil {
		return err
	}
	// A reimaged VM keeps its Node object, cordoned until the roller lets it take pods; a fresh,
	// schedulable one here would take pods before KWOK serves it, and they would stay Pending.
	registered := nodes[i].DeepCopy()
	switch old, err := cs.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{}); {
	case err == nil:
		registered.Spec.Unschedulable = old.Spec.Unschedulable
	case !apierrors.IsNotFound(err):
		return err
	}
	if err := cs.CoreV1().Nodes().Delete(ctx, name, metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
		return err
	}
	if err := machines.Poll(ctx, time.Minute, name+" deleted", func(ctx context.Context) error {
		_, err := cs.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			return nil
		}
		return fmt.Errorf("still there (%v)", err)
	}); err != nil {
		return err
	}
	_, err = cs.CoreV1().Nodes().Create(ctx, registered, metav1.CreateOptions{})
	return err
}

// FreshBackup runs clusterforge-etcd-backup gate on a main member, as the Azure target does.
func (t *RollTarget) FreshBackup(ctx context.Context) error { return t.EtcdGate(ctx) }

// BackupNow takes a snapshot through clusterforge-etcd-backup, which verifies it.
func (t *RollTarget) BackupNow(ctx context.Context) error {
	_, err := t.BackupEtcd(ctx)
	return err
}

// Prepare applies the desired add-ons: the in-place part of the change.
func (t *RollTarget) Prepare(ctx context.Context) error {
	objs, err := t.desired.Addons()
	if err != nil {
		return err
	}
	return t.Apply(ctx, objs...)
}

// Commit makes the desired spec and PKI the rehearsal's own and records it as applied.
func (t *RollTarget) Commit(context.Context) error {
	t.Cluster, t.Stack, t.Bundle = t.desired.Cluster, t.desired.Stack, t.desired.Bundle
	if err := t.writeClientPKI(); err != nil {
		return err
	}
	if err := t.saveIdentity(); err != nil {
		return err
	}
	return t.recordApplied()
}

// Running reports whether the rehearsal's supervisor answers.
func Running(dir string) bool {
	conn, err := net.Dial("unix", ControlSocket(dir))
	if err == nil {
		conn.Close()
	}
	return err == nil
}

// appliedFile is where a rehearsal records the spec it runs (spec.Resolved), as the Pulumi
// program records it in the appliedSpec stack output.
func (p *Layout) appliedFile() string { return filepath.Join(p.Dir, "applied.yaml") }

// RollJournal is the journal of a roll of this rehearsal in progress.
func (p *Layout) RollJournal() string { return filepath.Join(p.Dir, "roll.json") }

// Applied reads the spec the rehearsal was last applied with.
func (p *Layout) Applied() (*spec.Cluster, error) {
	data, err := os.ReadFile(p.appliedFile())
	if err != nil {
		return nil, err
	}
	return spec.ParseResolved(data)
}

// PendingRoll is what desired changes against what the rehearsal in dir last applied that needs a
// roll or is refused, and that applied spec: machines keep what they were applied with until a
// roll replaces them, as on Azure. Nothing before the first start or when all applies in place.
func PendingRoll(dir string, desired *spec.Cluster) ([]change.Change, *spec.Cluster) {
	applied, err := (&Layout{Layout: &machines.Layout{Options: machines.Options{Dir: dir}}}).Applied()
	if err != nil {
		return nil, nil
	}
	changes := slices.DeleteFunc(change.Diff(applied, desired), func(c change.Change) bool { return c.Class == change.InPlace })
	if len(changes) == 0 {
		return nil, nil
	}
	return changes, applied
}

// recordApplied writes the layout's stack as the one last applied, what `make diff` compares with.
func (p *Layout) recordApplied() error {
	data, err := p.Stack.Resolved()
	if err != nil {
		return err
	}
	return machines.WriteFile(p.appliedFile(), string(data), 0o644)
}

// Inventory lists the control-plane machines and the nodes of every pool.
func (p *Layout) Inventory(ctx context.Context) (change.Inventory, error) {
	inv := change.Inventory{}
	for _, in := range p.Instances {
		inv[in.Role] = append(inv[in.Role], in.Name)
	}
	return roll.AddNodes(ctx, p, inv)
}

// Attach plans the rehearsal in dir as it was last applied, to read from it (`make diff`); it
// starts and writes nothing.
func Attach(dir, tools string) (*Layout, error) {
	p := &Layout{Layout: &machines.Layout{Options: machines.Options{Dir: dir}}}
	applied, err := p.Applied()
	if err != nil {
		return nil, fmt.Errorf("no rehearsal of this stack has been applied in %s: %w", dir, err)
	}
	attached, err := NewLayout(applied, machines.Options{Dir: dir, Tools: tools})
	if err != nil {
		return nil, err
	}
	if attached.fresh {
		return nil, fmt.Errorf("%s has no identity of its own: rehearse it again", dir)
	}
	return attached, nil
}
