package spec

import (
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"slices"
	"strings"
	"testing"
)

func freezeStack(t *testing.T, name string, siblings ...*Cluster) ([]byte, *Cluster) {
	t.Helper()
	return freezeEdited(t, name, func(s string) string { return s }, siblings...)
}

// freezeEdited freezes a checked-in stack, unfrozen and edited.
func freezeEdited(t *testing.T, name string, edit func(string) string, siblings ...*Cluster) ([]byte, *Cluster) {
	t.Helper()
	data, err := os.ReadFile(StackFile(filepath.Join("..", "..", StackDir), name))
	if err != nil {
		t.Fatal(err)
	}
	frozen, err := Freeze([]byte(edit(string(unfreeze(data)))), siblings)
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
	grown := strings.Replace(string(data), "maxNodes: 995", "maxNodes: 1395", 1)
	grown = strings.Replace(grown, "targetNodes: 2500", "targetNodes: 2900", 1)
	g, err := ParseStackFile([]byte(grown))
	if err != nil {
		t.Fatal(err)
	}
	if g.EtcdMain.VMSize != c.EtcdMain.VMSize || g.APIServer.VMSize != c.APIServer.VMSize || !slices.Equal(g.NodeSubnets(), c.NodeSubnets()) {
		t.Errorf("growing a frozen stack moved its sizes: etcd %s -> %s, apiserver %s -> %s, VNets %v -> %v",
			c.EtcdMain.VMSize, g.EtcdMain.VMSize, c.APIServer.VMSize, g.APIServer.VMSize, c.NodeSubnets(), g.NodeSubnets())
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

// Stacks peered with one hub get disjoint address plans; CheckHub refuses overlap.
func TestFreezeGivesEachClusterItsOwnBlock(t *testing.T) {
	_, dev := freezeStack(t, "dev")
	onDevsHub := func(s string) string {
		return regexp.MustCompile(`vnetId: \S+`).ReplaceAllString(s, "vnetId: "+dev.Network.Hub.VNetID)
	}
	_, big := freezeEdited(t, "prod-2500", onDevsHub, dev)
	if err := CheckHub(big, []*Cluster{dev}); err != nil {
		t.Fatal(err)
	}
	_, clash := freezeEdited(t, "prod-2500", onDevsHub)
	err := CheckHub(clash, []*Cluster{dev, big})
	if err == nil || !strings.Contains(err.Error(), "network.addressSpace") || !strings.Contains(err.Error(), "cf-dev's 10.0.0.0/23") {
		t.Fatalf("two clusters on 10.0.0.0 behind one hub: %v", err)
	}
}

// A cluster frozen at 2,500 nodes and grown to 10,000 keeps every address it had: the control
// plane's, and each pool's VNets, to which the growth only appends, even when the first pool
// needs a VNet more (4,000 nodes of 10 pods fill one).
func TestGrowthKeepsEveryAddress(t *testing.T) {
	small := strings.NewReplacer("maxPods: 16\n", "maxPods: 10\n", "maxNodes: 1995\n", "maxNodes: 495\n", "maxNodes: 8000\n", "maxNodes: 2000\n")
	data, c := freezeEdited(t, "prod-10k", small.Replace)
	if c.TargetNodes != 2500 {
		t.Fatalf("the small stack has %d nodes", c.TargetNodes)
	}
	grown := strings.NewReplacer("maxNodes: 495\n", "maxNodes: 4095\n", "maxNodes: 2000\n", "maxNodes: 5900\n", "targetNodes: 2500 ", "targetNodes: 10000 ").Replace(string(data))
	refrozen, err := Freeze([]byte(grown), nil)
	if err != nil {
		t.Fatal(err)
	}
	g, err := ParseStackFile(refrozen)
	if err != nil {
		t.Fatal(err)
	}
	if g.TargetNodes != 10000 || !reflect.DeepEqual(g.Network, c.Network) {
		t.Errorf("growth moved the control plane's addresses: %+v -> %+v", c.Network, g.Network)
	}
	for i, p := range g.Pools {
		before := c.Pools[i].VNets
		if len(p.VNets) != p.VNetsNeeded() || !slices.Equal(p.VNets[:len(before)], before) {
			t.Errorf("pool %s: VNets %v -> %v, want the first kept and %d in all", p.Name, before, p.VNets, p.VNetsNeeded())
		}
	}
	if len(g.NodeSubnets()) == len(c.NodeSubnets()) {
		t.Errorf("the test grows too little: VNets %v", g.NodeSubnets())
	}
}
