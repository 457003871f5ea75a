package change

import (
	"fmt"
	"reflect"
	"testing"

	"github.com/clusterforge/clusterforge/components/spec"
)

func names(prefix string, n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = fmt.Sprintf("%s-%d", prefix, i)
	}
	return out
}

func TestPlanStages(t *testing.T) {
	base := applied(t)
	desired := copyOf(t, base)
	desired.ControlPlaneImage += "1"
	desired.Versions.Kubernetes, desired.Versions.Kubelet = spec.DefaultKubernetesVersion, spec.DefaultKubernetesVersion
	inv := Inventory{
		spec.RoleEtcdMain: names("m", 5), spec.RoleEtcdEvents: names("e", 3), spec.RoleAPIServer: names("a", 2),
		"worker-cpu": names("c", 41), "worker-gpu": nil,
	}
	p, err := NewPlan(base, desired, inv)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, s := range p.Stages {
		got = append(got, fmt.Sprintf("%s %s %d", s.Role, s.Kind, len(s.Batches)))
	}
	want := []string{
		"etcd-events etcd-member 3", "etcd-main etcd-member 5", "apiserver apiserver 2",
		// A canary, then batches of 5 % of 41 (3): 1 + ceil(40/3) = 15; the empty GPU pool has no stage.
		"worker-cpu workers 15",
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("stages %q, want %q", got, want)
	}
	cpu := p.Stages[3].Batches
	if len(cpu[0]) != 1 || len(cpu[1]) != 3 || len(cpu[14]) != 1 {
		t.Errorf("worker batches %v: want a canary of 1, batches of 3, the remainder last", cpu)
	}
	if len(p.Machines()) != 5+3+2+41 {
		t.Errorf("%d machines in the plan, want every one once", len(p.Machines()))
	}
}

func TestNothingToRoll(t *testing.T) {
	base := applied(t)
	desired := copyOf(t, base)
	desired.DNS.Replicas = 9
	p, err := NewPlan(base, desired, Inventory{spec.RoleAPIServer: names("a", 2)})
	if err != nil || len(p.Stages) != 0 || len(p.Changes) != 1 {
		t.Fatalf("an in-place change planned %v stages, %v changes, err %v", p.Stages, p.Changes, err)
	}
}
