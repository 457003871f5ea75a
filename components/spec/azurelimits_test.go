package spec

import (
	"flag"
	"fmt"
	"maps"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/clusterforge/clusterforge/test/docblock"
)

var update = flag.Bool("update", false, "rewrite the generated blocks of the docs")

// TestLimitUsesAtTheLimit takes one stack to each limit the stack's own fields decide, then one
// step past it: at the limit the use is not over, past it the row is over and names the field.
func TestLimitUsesAtTheLimit(t *testing.T) {
	tinyControlPlane := func(c *Cluster) {
		c.APIServer.Count, c.APIServer.VMSize = 2, "Standard_D2ds_v5"
		c.EtcdMain.Members, c.EtcdMain.VMSize, c.EtcdEvents.Members, c.EtcdEvents.VMSize = 3, "Standard_D2ds_v5", 1, "Standard_D2ds_v5"
		c.Pools[0].VMSize = "Standard_D2ds_v5"
	}
	// One worker VNet of 4,000 nodes (the most one holds: four scale sets, an ASG's IP
	// configurations) downloading d layers each at once: 4,000 × (d + 16) ports. Past the
	// validated 64 downloads: the ceiling keeps every VNet within 5 public IPs.
	downloading := func(c *Cluster, d int) {
		c.Pools[0].MaxNodes, c.Pools[0].MaxPods, c.TargetNodes = 4000, 1, 4000
		c.Kubelet.MaxConcurrentDownloads = d
	}
	for _, tc := range []struct {
		limit *Limit
		// edit sets the stack at the limit (step 0) or one step past it (step 1).
		edit  func(c *Cluster, step int)
		field string
	}{
		{&LimitPrivateIPsPerPeeredGroup, func(c *Cluster, step int) {
			c.Pools[0].MaxPods = 30
			c.Pools[0].MaxNodes = int((LimitPrivateIPsPerPeeredGroup.Value-c.controlPlaneAddresses())/31) + step
			c.TargetNodes = c.Pools[0].MaxNodes
		}, "pools"},
		{&LimitIPConfigsPerNIC, func(c *Cluster, step int) { c.Pools[0].MaxPods = maxPodsPerNode + step }, "pools[0].maxPods"},
		{&LimitNATPublicIPs, func(c *Cluster, step int) { downloading(c, 242+step) }, "kubelet.maxConcurrentDownloads"}, // 16 IPs, then 17
		// The control plane's gateway and the worker VNet's: 1 + 9 IPs, then 1 + 10.
		{&LimitStandardPublicIPs, func(c *Cluster, step int) { downloading(c, 129+step) }, "targetNodes"},
		{&LimitLoadBalancerBackends, func(c *Cluster, step int) { c.APIServer.Count = int(LimitLoadBalancerBackends.Value) + step }, "apiServer.count"},
		{&LimitNICsPerRegion, func(c *Cluster, step int) {
			c.TargetNodes = int(LimitNICsPerRegion.Value-c.machineCount()) + c.TargetNodes + step
		}, "targetNodes"},
		{&LimitVMsPerRegion, func(c *Cluster, step int) {
			c.TargetNodes = int(LimitVMsPerRegion.Value-c.machineCount()) + c.TargetNodes + step
		}, "targetNodes"},
		{&LimitRegionalVCPUs, func(c *Cluster, step int) {
			tinyControlPlane(c) // 2 + 3 + 1 VMs of 2 vCPUs: 12
			c.Pools[0].MaxNodes = 4 + step
		}, "pools"},
		{&LimitScaleSetVMUpdates, func(c *Cluster, step int) {
			c.Pools[0].MaxNodes = int(LimitScaleSetVMUpdates.Value)*100/RollBatchPercent + step
		}, "pools[0].maxNodes"},
		{&LimitScaleSetVMDeletes, func(c *Cluster, step int) {
			c.Autoscaler.MaxScaleDownParallelism = int(LimitScaleSetVMDeletes.Value) + step
		}, "autoscaler.maxScaleDownParallelism"},
	} {
		for step := range 2 {
			c := parseValid(t)
			c.Pools = c.Pools[:1] // the arithmetic of one pool; the system pool adds its own
			tc.edit(c, step)
			c.placeNetwork(c.outsideTaken())
			u, ok := useOf(c.LimitUses(), tc.limit)
			if !ok {
				t.Fatalf("%s: no row", tc.limit.Name)
			}
			if u.Over() != (step == 1) {
				t.Errorf("%s, step %d: use %d of %d, over %v", tc.limit.Name, step, u.Use, tc.limit.Value, u.Over())
			}
			if step == 1 && (u.Field != tc.field || u.Fix == "") {
				t.Errorf("%s: over names field %q (fix %q), want %q", tc.limit.Name, u.Field, u.Fix, tc.field)
			}
		}
	}
}

// TestScaleSetsNeverPassTheirLimit: a pool one past what a scale set holds is split, so its
// scale sets stay within the limit.
func TestScaleSetsNeverPassTheirLimit(t *testing.T) {
	for _, tc := range []struct {
		size  string
		limit *Limit
	}{
		{"Standard_D16ds_v5", &LimitScaleSetInstances},
		{"Standard_ND96isr_H100_v5", &LimitPlacementGroupInstances},
	} {
		for step, want := range []int64{tc.limit.Value, tc.limit.Value/2 + 1} {
			c := parseValid(t)
			c.Pools[0].VMSize, c.Pools[0].MaxNodes = tc.size, int(tc.limit.Value)+step
			u, ok := useOf(c.LimitUses(), tc.limit)
			if !ok || u.Use != want || u.Over() {
				t.Errorf("%s with %d nodes: largest scale set %d (row %v), want %d", tc.size, c.Pools[0].MaxNodes, u.Use, ok, want)
			}
		}
	}
}

// TestWorkerVNetsNeverPassTheirLimit: a pool one node past what its VNets hold gets another VNet,
// and its first VNets keep their scale sets.
func TestWorkerVNetsNeverPassTheirLimit(t *testing.T) {
	for _, tc := range []struct {
		size          string
		pods, perVNet int // two scale sets of 1,000 × 31 fit 65,531 addresses; 40 of 100 × 11 fit 4,000 nodes
	}{
		{"Standard_D16ds_v5", 30, 2000},
		{"Standard_ND96isr_H100_v5", 10, 4000},
	} {
		var first []string
		for step := range 2 {
			c := parseValid(t)
			c.Pools[0].VMSize, c.Pools[0].MaxPods, c.Pools[0].MaxNodes = tc.size, tc.pods, tc.perVNet+step
			c.TargetNodes = c.Pools[0].MaxNodes
			c.placeNetwork(c.outsideTaken())
			u, _ := useOf(c.LimitUses(), &LimitPrivateIPsPerVNet)
			if len(c.Pools[0].VNets) != 1+step || u.Over() || (step == 1 && c.Pools[0].VNets[0] != first[0]) {
				t.Errorf("%s, %d nodes: VNets %v (before %v), largest %d addresses", tc.size, c.Pools[0].MaxNodes, c.Pools[0].VNets, first, u.Use)
			}
			first = c.Pools[0].VNets
		}
	}
}

func useOf(uses []LimitUse, l *Limit) (LimitUse, bool) {
	for _, u := range uses {
		if u.Limit == l {
			return u, true
		}
	}
	return LimitUse{}, false
}

// The stack reference's table of limits is spec.Limits (`go test ./components/spec -run LimitsPage
// -update` rewrites it).
func TestLimitsPageShowsTheTable(t *testing.T) {
	var b strings.Builder
	b.WriteString("| limit | value | kind | per | source |\n|---|---|---|---|---|\n")
	for _, l := range Limits {
		fmt.Fprintf(&b, "| %s | %d | %s | %s | [page](%s) |\n", l.Name, l.Value, l.Kind, l.Per, l.Source)
	}
	docblock.Check(t, "../../docs/reference/stack.md", "limits", b.String(), *update, "go test ./components/spec -run LimitsPage -update")
}

// The Azure prerequisites page lists each checked-in stack's vCPUs by VM size, at nodes and at
// maxNodes (`go test ./components/spec -run PrerequisitesPage -update` rewrites it).
func TestPrerequisitesPageShowsEachStacksVCPUs(t *testing.T) {
	files, err := filepath.Glob(filepath.Join("..", "..", StackDir, "Pulumi.*.yaml"))
	if err != nil || len(files) == 0 {
		t.Fatalf("stacks: %v", err)
	}
	var b strings.Builder
	b.WriteString("| stack | region | VM size | vCPUs at `nodes` | vCPUs at `maxNodes` |\n|---|---|---|---:|---:|\n")
	for _, f := range files {
		c, err := LoadStack(f)
		if err != nil {
			t.Fatal(err)
		}
		stack := strings.TrimSuffix(strings.TrimPrefix(filepath.Base(f), "Pulumi."), ".yaml")
		now, full := c.VCPUsBySize(false), c.VCPUsBySize(true)
		var totalNow, totalFull int64
		for _, size := range slices.Sorted(maps.Keys(full)) {
			fmt.Fprintf(&b, "| %s | %s | %s | %d | %d |\n", stack, c.Location, size, now[size], full[size])
			totalNow, totalFull = totalNow+now[size], totalFull+full[size]
		}
		fmt.Fprintf(&b, "| %s | %s | **regional total** | **%d** | **%d** |\n", stack, c.Location, totalNow, totalFull)
	}
	docblock.Check(t, "../../docs/reference/azure-prerequisites.md", "vcpus", b.String(), *update,
		"go test ./components/spec -run PrerequisitesPage -update")
}
