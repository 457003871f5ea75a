package capacity

import (
	"math"
	"testing"

	"github.com/clusterforge/clusterforge/components/spec"
)

func TestNeedsSpreadOnlyTheAPIServersRequests(t *testing.T) {
	c := &spec.Cluster{
		APIServer:  spec.APIServer{Count: 3, VMSize: "Standard_D16ds_v5"},
		EtcdMain:   spec.Etcd{Members: 5, VMSize: "Standard_D8ds_v5"},
		EtcdEvents: spec.Etcd{Members: 3, VMSize: "Standard_D4ds_v5"},
	}
	f := Figures{Steps: []int{1000, 2000, 4000}, Costs: []Cost{
		{Component: spec.RoleAPIServer, Role: spec.RoleAPIServer, BaseCores: 0.5, CoresPer1000Nodes: 0.3},
		{Component: "kube-controller-manager", Role: spec.RoleAPIServer, BaseCores: 0.1, CoresPer1000Nodes: 0.05},
		{Component: spec.RoleEtcdMain, Role: spec.RoleEtcdMain, BaseCores: 0.2, CoresPer1000Nodes: 0.1},
		{Component: spec.RoleEtcdEvents, Role: spec.RoleEtcdEvents, BaseCores: 0.05, CoresPer1000Nodes: 0.02},
		{Component: "kwok", BaseCores: 9, CoresPer1000Nodes: 9}, // the benchmark's own: on no machine
	}}
	needs, err := Needs(c, f, 6000)
	if err != nil {
		t.Fatal(err)
	}
	want := []Need{
		// 0.5 + 1.8/3 for the apiserver's third of the requests, 0.1 + 0.3 for the leader's controllers.
		{Role: spec.RoleAPIServer, VMSize: "Standard_D16ds_v5", Machines: 3, VCPUs: 16, Cores: 1.5},
		// Every member applies every write.
		{Role: spec.RoleEtcdMain, VMSize: "Standard_D8ds_v5", Machines: 5, VCPUs: 8, Cores: 0.8},
		{Role: spec.RoleEtcdEvents, VMSize: "Standard_D4ds_v5", Machines: 3, VCPUs: 4, Cores: 0.17},
	}
	if len(needs) != len(want) {
		t.Fatalf("%+v", needs)
	}
	for i, n := range needs {
		w := want[i]
		if n.Role != w.Role || n.VMSize != w.VMSize || n.Machines != w.Machines || n.VCPUs != w.VCPUs || math.Abs(n.Cores-w.Cores) > 1e-9 {
			t.Errorf("need %+v, want %+v", n, w)
		}
	}
	if s := needs[0].Share(); math.Abs(s-1.5/16) > 1e-12 {
		t.Errorf("share %v", s)
	}
	if !f.Extrapolated(6000) || f.Extrapolated(4000) {
		t.Error("6,000 nodes is beyond the largest step, 4,000 is not")
	}
	f.Costs = f.Costs[:2]
	if _, err := Needs(c, f, 6000); err == nil {
		t.Error("figures without an etcd's cost: no error")
	}
}

// The checked-in figures parse; once published, they cost every control-plane role.
func TestPublishedFiguresParse(t *testing.T) {
	f, ok, err := Published()
	if err != nil {
		t.Fatal(err)
	}
	if !ok {
		return
	}
	one := spec.Etcd{Members: 1, VMSize: "Standard_D4s_v5"}
	if _, err := Needs(&spec.Cluster{APIServer: spec.APIServer{Count: 1, VMSize: "Standard_D4s_v5"}, EtcdMain: one, EtcdEvents: one}, f, 1000); err != nil {
		t.Error(err)
	}
	if f.Date == "" || f.Commit == "" || f.Machine == "" || len(f.Steps) == 0 {
		t.Errorf("published figures without their provenance: %+v", f)
	}
}
