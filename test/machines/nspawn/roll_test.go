package nspawn

import (
	"context"
	"errors"
	"path/filepath"
	"testing"

	"github.com/clusterforge/clusterforge/components/spec"
	"github.com/clusterforge/clusterforge/test/machines"
)

// A roll of booted machines that would replace etcd members is refused before anything changes:
// at Prepare for a spec change, and at the member itself for what the spec does not show (a
// certificate renewal), before its machine is stopped.
func TestBootRollRefusesEtcdMembers(t *testing.T) {
	c, err := spec.LoadStack(filepath.Join("..", "..", "..", "stacks", "Pulumi.dev.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	placed, err := placeMachines(c)
	if err != nil {
		t.Fatal(err)
	}
	desired, err := c.Clone()
	if err != nil {
		t.Fatal(err)
	}
	desired.EtcdMain.VMSize = "Standard_E2ds_v5"
	b := &Booted{Layout: &machines.Layout{Cluster: c}, Machines: placed, opts: Options{PlanDir: "applied-plan"}}
	for _, m := range placed {
		b.Instances = append(b.Instances, machines.Instance{Name: m.Name, Role: m.Role, IP: m.Address})
	}
	target := b.RollTo(desired, "desired-plan")
	if err := target.Prepare(context.Background()); !errors.Is(err, errEtcdNotRolled) {
		t.Errorf("Prepare of an etcd-main size change: %v, want the refusal", err)
	}
	if b.Cluster != c || b.opts.PlanDir != "applied-plan" {
		t.Error("the refused Prepare changed the boot's model")
	}
	for _, role := range []string{spec.RoleEtcdMain, spec.RoleEtcdEvents} {
		member := b.Of(role)[0].Name
		if err := target.Replace(context.Background(), member); !errors.Is(err, errEtcdNotRolled) {
			t.Errorf("Replace(%s): %v, want the refusal", member, err)
		}
		if err := target.StopEtcd(context.Background(), member); !errors.Is(err, errEtcdNotRolled) {
			t.Errorf("StopEtcd(%s): %v, want the refusal", member, err)
		}
	}
}
