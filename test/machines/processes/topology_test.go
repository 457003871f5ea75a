package processes

import (
	"maps"
	"path/filepath"
	"testing"

	"github.com/clusterforge/clusterforge/components/spec"
	"github.com/clusterforge/clusterforge/test/machines"
	"github.com/clusterforge/clusterforge/test/tier"
)

// The ha topology lays out the stack's own machines uncapped; a topology of another name is refused.
func TestTopologyShapesTheRehearsal(t *testing.T) {
	c := devStack(t)
	ha := topologyLayout(t, c, TopologyHA)
	want := map[string]int{spec.RoleAPIServer: c.APIServer.Count, spec.RoleEtcdMain: c.EtcdMain.Members, spec.RoleEtcdEvents: c.EtcdEvents.Members}
	for _, role := range topologyRoles {
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
}

// The capacity topology lays out one machine of each control-plane role, each role capped at its
// cores (a cgroup per role, hence root) and each etcd member on a disk of its own.
func TestAsRootCapacityTopology(t *testing.T) {
	tier.Root(t)
	capacity := topologyLayout(t, devStack(t), TopologyCapacity)
	for _, role := range topologyRoles {
		if got := len(capacity.Of(role)); got != 1 {
			t.Errorf("capacity: %d %s machines, want 1", got, role)
		}
	}
	if !maps.Equal(capacity.CPULimits, CapacityCPU) || capacity.EtcdFsyncLatency != CapacityFsyncLatency {
		t.Errorf("capacity: CPU limits %v, fsync %s: want %v, %s", capacity.CPULimits, capacity.EtcdFsyncLatency, CapacityCPU, CapacityFsyncLatency)
	}
}

var topologyRoles = []string{spec.RoleAPIServer, spec.RoleEtcdMain, spec.RoleEtcdEvents}

func devStack(t *testing.T) *spec.Cluster {
	t.Helper()
	c, err := spec.LoadStack(filepath.Join("..", "..", "..", "stacks", "Pulumi.dev.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// topologyLayout is the layout of c shaped as topology.
func topologyLayout(t *testing.T, c *spec.Cluster, topology string) *Layout {
	t.Helper()
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
