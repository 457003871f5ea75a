package processes

import (
	"maps"
	"os"
	"path/filepath"
	"testing"

	"github.com/clusterforge/clusterforge/components/spec"
	"github.com/clusterforge/clusterforge/test/machines"
)

// The capacity topology lays out one machine of each control-plane role, each role capped at its
// cores and each etcd member on a disk of its own; the ha topology lays out the stack's own
// machines uncapped; a topology of another name is refused.
func TestTopologyShapesTheRehearsal(t *testing.T) {
	c, err := spec.LoadStack(filepath.Join("..", "..", "..", "stacks", "Pulumi.dev.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	roles := []string{spec.RoleAPIServer, spec.RoleEtcdMain, spec.RoleEtcdEvents}
	layout := func(topology string) *Layout {
		shaped, o, err := WithTopology(c, machines.Options{Dir: t.TempDir(), Tools: t.TempDir(), Base: 3}, topology)
		if err != nil {
			t.Fatal(err)
		}
		p, err := NewLayout(shaped, o)
		if err != nil {
			t.Fatal(err)
		}
		return p
	}
	ha := layout(TopologyHA)
	want := map[string]int{spec.RoleAPIServer: c.APIServer.Count, spec.RoleEtcdMain: c.EtcdMain.Members, spec.RoleEtcdEvents: c.EtcdEvents.Members}
	for _, role := range roles {
		if got := len(ha.Of(role)); got != want[role] || got < 2 {
			t.Errorf("ha: %d %s machines, want the stack's %d", got, role, want[role])
		}
	}
	if ha.CPULimits != nil || ha.EtcdFsyncLatency != 0 {
		t.Errorf("ha: CPU limits %v, fsync %s: want none", ha.CPULimits, ha.EtcdFsyncLatency)
	}
	if _, _, err := WithTopology(c, machines.Options{}, "capacty"); err == nil {
		t.Error("a misspelt topology was accepted")
	}
	if os.Geteuid() != 0 {
		t.Skip("the capacity topology needs root (a cgroup per role)")
	}
	capacity := layout(TopologyCapacity)
	for _, role := range roles {
		if got := len(capacity.Of(role)); got != 1 {
			t.Errorf("capacity: %d %s machines, want 1", got, role)
		}
	}
	if !maps.Equal(capacity.CPULimits, CapacityCPU) || capacity.EtcdFsyncLatency != CapacityFsyncLatency {
		t.Errorf("capacity: CPU limits %v, fsync %s: want %v, %s", capacity.CPULimits, capacity.EtcdFsyncLatency, CapacityCPU, CapacityFsyncLatency)
	}
}
