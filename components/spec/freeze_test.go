package spec

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func freezeStack(t *testing.T, name string, siblings ...*Cluster) ([]byte, *Cluster) {
	t.Helper()
	data, err := os.ReadFile(StackFile(filepath.Join("..", "..", StackDir), name))
	if err != nil {
		t.Fatal(err)
	}
	frozen, err := Freeze(unfreeze(data), siblings)
	if err != nil {
		t.Fatal(err)
	}
	c, err := ParseStackFile(frozen)
	if err != nil {
		t.Fatal(err)
	}
	return frozen, c
}

// unfreeze drops the lines make freeze wrote: the stack as it was before its first apply.
func unfreeze(data []byte) []byte {
	var kept []string
	for _, line := range strings.SplitAfter(string(data), "\n") {
		if !strings.Contains(line, "# frozen by make freeze") {
			kept = append(kept, line)
		}
	}
	return []byte(strings.Join(kept, ""))
}

// The checked-in stacks are frozen, as `pulumi up` requires.
func TestStacksAreFrozen(t *testing.T) {
	files, _ := filepath.Glob(filepath.Join("..", "..", StackDir, "Pulumi.*.yaml"))
	for _, f := range files {
		c, err := LoadStack(f)
		if err != nil {
			t.Fatal(err)
		}
		if left := c.Unfrozen(); len(left) > 0 {
			t.Errorf("%s leaves %v to derivation: run make freeze STACK=<env>", f, left)
		}
	}
}

// A frozen stack keeps its sizes when a pool grows: raising targetNodes past a tier is the only
// way to change them, and then only by editing the frozen lines.
func TestFrozenSizesSurviveGrowth(t *testing.T) {
	data, c := freezeStack(t, "prod-2500")
	if left := c.Unfrozen(); len(left) > 0 {
		t.Fatalf("left derived: %v", left)
	}
	if !strings.Contains(string(data), "# 2,500 nodes") || !strings.Contains(string(data), "# frozen by make freeze (targetNodes 2500)") {
		t.Errorf("freeze lost the file's comments or did not mark its lines:\n%s", data)
	}
	grown := strings.Replace(string(data), "maxNodes: 1000", "maxNodes: 1400", 1)
	grown = strings.Replace(grown, "targetNodes: 2500", "targetNodes: 2900", 1)
	g, err := ParseStackFile([]byte(grown))
	if err != nil {
		t.Fatal(err)
	}
	if g.EtcdMain.VMSize != c.EtcdMain.VMSize || g.APIServer.VMSize != c.APIServer.VMSize || g.Network.NodeSubnet != c.Network.NodeSubnet {
		t.Errorf("growing a frozen stack moved its sizes: etcd %s -> %s, apiserver %s -> %s, nodes %s -> %s",
			c.EtcdMain.VMSize, g.EtcdMain.VMSize, c.APIServer.VMSize, g.APIServer.VMSize, c.Network.NodeSubnet, g.Network.NodeSubnet)
	}
	// Unfrozen, the same growth crosses into the next tier.
	unfrozen := &Cluster{Name: "x", Pools: g.Pools}
	unfrozen.Default()
	if unfrozen.EtcdMain.VMSize == c.EtcdMain.VMSize {
		t.Errorf("the test grows too little: an unfrozen stack of %d nodes keeps %s too", unfrozen.TargetNodes, c.EtcdMain.VMSize)
	}
	if again, err := Freeze(data, nil); err != nil || string(again) != string(data) {
		t.Errorf("freezing a frozen stack changed it (err %v)", err)
	}
}

// Stacks peered with one hub get disjoint address plans; CheckSharedHub refuses overlap.
func TestFreezeGivesEachClusterItsOwnBlock(t *testing.T) {
	_, dev := freezeStack(t, "dev")
	_, big := freezeStack(t, "prod-2500", dev)
	if err := CheckSharedHub(big, []*Cluster{dev}); err != nil {
		t.Fatal(err)
	}
	_, clash := freezeStack(t, "prod-2500")
	err := CheckSharedHub(clash, []*Cluster{dev, big})
	if err == nil || !strings.Contains(err.Error(), "network.addressSpace") || !strings.Contains(err.Error(), "cf-dev (10.0.0.0/21)") {
		t.Fatalf("two clusters on 10.0.0.0 behind one hub: %v", err)
	}
}
