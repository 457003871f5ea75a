package rollazure

import (
	"context"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/Azure/azure-sdk-for-go/sdk/resourcemanager/compute/armcompute/v6"

	"github.com/clusterforge/clusterforge/components/azurerbac"
	"github.com/clusterforge/clusterforge/components/spec"
	"github.com/clusterforge/clusterforge/test/standin/arm"
)

// reimaged records the instances the stand-in's machines were reimaged as; each scale set's
// operation runs on its own.
type reimaged struct {
	mu    sync.Mutex
	names []string
}

func (r *reimaged) Create(context.Context, arm.Instance) (string, error) { return "", nil }
func (r *reimaged) Delete(context.Context, arm.Instance) error           { return nil }
func (r *reimaged) Reimage(_ context.Context, in arm.Instance) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.names = append(r.names, in.ComputerName+"@"+in.Image)
	return nil
}
func (r *reimaged) RunCommand(context.Context, string, []string) (string, string, error) {
	return "", "", nil
}

// A batch of workers across two pools is moved onto the new model with two operations per scale
// set, each listed once, at Resource Manager's stand-in, with the autoscaler's role (Virtual
// Machine Contributor, the one an operator's roll needs at least).
func TestWorkerBatchIsTwoOperationsPerScaleSet(t *testing.T) {
	c, err := spec.LoadStack(filepath.Join("..", "..", spec.StackDir, "Pulumi.dev.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	machines := &reimaged{}
	srv := &arm.Server{Subscription: "00000000-0000-0000-0000-000000000000", ResourceGroup: c.ResourceGroup(), Location: c.Location, Speedup: 600, Machines: machines}
	local := arm.Serve(t, srv, "22222222-2222-2222-2222-222222222222")
	const operator = "11111111-1111-1111-1111-00000000000a"
	local.Grant(operator, local.GroupID(), azurerbac.BuiltInRoleActions[azurerbac.RoleVirtualMachineContributor]...)
	var pools []string
	for _, s := range c.ScaleSets() {
		var four []*arm.Instance
		for range 4 {
			four = append(four, &arm.Instance{Image: "image-1"})
		}
		srv.AddScaleSet(arm.ScaleSet{Name: s.AzureName, ComputerNamePrefix: s.AzureName, Image: "image-2", Instances: four})
		pools = append(pools, s.AzureName)
	}
	if len(pools) < 2 {
		t.Fatalf("the dev stack has %d pools; the test needs two", len(pools))
	}
	f, err := armcompute.NewClientFactory("00000000-0000-0000-0000-000000000000", local.Credential(operator), local.Options())
	if err != nil {
		t.Fatal(err)
	}
	target := &Target{Cluster: c, Azure: Clients{ScaleSets: f.NewVirtualMachineScaleSetsClient(), ScaleSetVMs: f.NewVirtualMachineScaleSetVMsClient()}}
	batch := []string{pools[0] + "000001", pools[0] + "000003", pools[1] + "000000"}
	if err := target.ReplaceWorkers(context.Background(), batch); err != nil {
		t.Fatal(err)
	}

	count := map[string]int{}
	for _, call := range srv.Calls() {
		count[strings.TrimPrefix(call.Action, "Microsoft.Compute/virtualMachineScaleSets/")]++
	}
	if count["manualUpgrade/action"] != 2 || count["reimage/action"] != 2 || count["virtualMachines/read"] > len(pools) {
		t.Errorf("calls by action %v: want one upgrade and one reimage per scale set of the batch, and no scale set listed twice", count)
	}
	slices.Sort(machines.names)
	want := []string{pools[0] + "000001@image-2", pools[0] + "000003@image-2", pools[1] + "000000@image-2"}
	slices.Sort(want)
	if !slices.Equal(machines.names, want) {
		t.Errorf("reimaged %v, want %v: the batch, on the new model, nothing else", machines.names, want)
	}
	if err := target.ReplaceWorkers(context.Background(), []string{"cf-dev-nowhere000000"}); err == nil {
		t.Error("a node no scale set holds was replaced")
	}
}
