package spec

import (
	"net/netip"
	"testing"
)

func mustPrefix(t *testing.T, s string) netip.Prefix {
	t.Helper()
	p, err := netip.ParsePrefix(s)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func ptrTo[T any](v T) *T { return &v }

// A worker scale set's name says its pool, split or not, and nothing else does.
func TestPoolOfScaleSet(t *testing.T) {
	c := &Cluster{Name: "cf-test", Pools: []Pool{{Name: "cpu", VMSize: "Standard_D4ds_v5", Nodes: 3, System: true},
		{Name: "gpu", VMSize: "Standard_ND96asr_v4", Nodes: 150, MaxNodes: 250}}}
	sets := c.ScaleSets()
	if len(sets) < 3 {
		t.Fatalf("%d scale sets, want the gpu pool split", len(sets))
	}
	for _, s := range sets {
		if pool, ok := PoolOfScaleSet(c.Name, s.AzureName); !ok || pool != s.Pool.Name {
			t.Errorf("%s: pool %q (%v), want %q", s.AzureName, pool, ok, s.Pool.Name)
		}
	}
	for _, name := range []string{"cf-other-cpu", "cf-test-cpu-", "cf-test-gpu-1x", "cf-test-", "cf-test-gpu-1-2", "cf-testcpu"} {
		if pool, ok := PoolOfScaleSet(c.Name, name); ok {
			t.Errorf("%s: pool %q, want none", name, pool)
		}
	}
}
