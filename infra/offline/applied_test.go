package offline

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/clusterforge/clusterforge/components/spec"
	"github.com/clusterforge/clusterforge/infra/azure"
	"github.com/clusterforge/clusterforge/infra/program"
)

// editedDev is the dev stack with one line replaced, as a stack file in a temporary directory,
// and the applied record of the unedited stack.
func editedDev(t *testing.T, old, new string) (path string, prev program.Previous) {
	t.Helper()
	data, err := os.ReadFile(stackFile("dev"))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(data), old) {
		t.Fatalf("the dev stack has no %q", old)
	}
	path = filepath.Join(t.TempDir(), "Pulumi.edited.yaml")
	writeFile(t, path, strings.Replace(string(data), old, new, 1), 0o644)
	c, err := spec.LoadStack(stackFile("dev"))
	if err != nil {
		t.Fatal(err)
	}
	resolved, err := c.Resolved()
	if err != nil {
		t.Fatal(err)
	}
	return path, program.Previous{AppliedSpec: string(resolved)}
}

func etcdMachines(r *Result) (vms, nics []Resource) {
	for _, res := range r.Resources {
		if !strings.Contains(res.Name, "-etcd-") {
			continue
		}
		switch res.Type {
		case "azure-native:compute:VirtualMachine":
			vms = append(vms, res)
		case "azure-native:network:NetworkInterface":
			nics = append(nics, res)
		}
	}
	return vms, nics
}

// Every etcd VM and NIC and the backup store are protected; the VMs ignore what Azure cannot
// change in place, so a plain `pulumi up` never replaces or half-updates a member.
func TestEtcdIsProtected(t *testing.T) {
	r := planAll(t)["dev"]
	vms, nics := etcdMachines(r)
	if len(vms) != 8 || len(nics) != 8 {
		t.Fatalf("%d etcd VMs and %d NICs, want 8 of each", len(vms), len(nics))
	}
	for _, res := range append(vms, nics...) {
		if !res.Protect {
			t.Errorf("%s %s is not protected", res.Type, res.Name)
		}
	}
	for _, vm := range vms {
		if !vm.DeleteBeforeReplace {
			t.Errorf("%s, whose name is fixed, is not deleted before its replacement is created", vm.Name)
		}
		for _, p := range []string{"osProfile.customData", "storageProfile.imageReference", "hardwareProfile.vmSize"} {
			if !slices.Contains(vm.IgnoreChanges, p) {
				t.Errorf("%s does not ignore %s", vm.Name, p)
			}
		}
	}
	for _, res := range append(byType(r, "azure-native:storage:StorageAccount"), byType(r, "azure-native:storage:BlobContainer")...) {
		if !res.Protect {
			t.Errorf("storage %s is not protected", res.Name)
		}
	}
}

// The URN make roll targets is the one the engine gives each member's VM.
func TestRollTargetsTheMembersURNs(t *testing.T) {
	r := planAll(t)["dev"]
	vms, _ := etcdMachines(r)
	var urns []string
	for _, vm := range vms {
		urns = append(urns, vm.URN)
	}
	for _, e := range r.Cluster.EtcdClusters() {
		for _, m := range e.Members {
			if urn := azure.EtcdMemberVMURN("dev", Project, r.Cluster, e.Role, m); !slices.Contains(urns, urn) {
				t.Errorf("make roll would target %s; the VMs' URNs are %v", urn, urns)
			}
		}
	}
}

// A change that needs a roll is refused by a plain `pulumi up`, preview included, naming the
// roll; `make roll`'s steps run it, lifting protection only from the member being replaced.
func TestRollChangesNeedTheRoll(t *testing.T) {
	path, prev := editedDev(t, "maxRequestsInflight: 400", "maxRequestsInflight: 500")
	_, err := RunAfter("edited", path, nil, prev)
	if err == nil || !strings.Contains(err.Error(), "make roll STACK=edited") || !strings.Contains(err.Error(), "apiServer.maxRequestsInflight") {
		t.Fatalf("a plain run of a roll change: %v", err)
	}
	if _, err := RunAfter("edited", path, nil, program.Previous{AppliedSpec: prev.AppliedSpec, RollStep: program.RollModels}); err != nil {
		t.Fatal(err)
	}
	member := "cf-dev-etcd-main-2"
	r, err := RunAfter("edited", path, nil, program.Previous{AppliedSpec: prev.AppliedSpec, RollStep: program.RollMember + member})
	if err != nil {
		t.Fatal(err)
	}
	vms, _ := etcdMachines(r)
	for _, vm := range vms {
		replacing := strings.HasSuffix(vm.Name, "-etcd-main-2")
		if vm.Protect == replacing || (len(vm.IgnoreChanges) == 0) != replacing {
			t.Errorf("%s: protect %v, ignoreChanges %v while the roll replaces %s", vm.Name, vm.Protect, vm.IgnoreChanges, member)
		}
	}
}

// An in-place change needs no roll; a refused one is refused even inside a roll.
func TestInPlaceAppliesRefusedNever(t *testing.T) {
	path, prev := editedDev(t, "maxNodes: 5\n", "maxNodes: 4\n")
	if _, err := RunAfter("edited", path, nil, prev); err != nil {
		t.Fatalf("an in-place change: %v", err)
	}
	path, prev = editedDev(t, "serviceCIDR: 172.16.0.0/16", "serviceCIDR: 172.17.0.0/16")
	prev.RollStep = program.RollDone
	_, err := RunAfter("edited", path, nil, prev)
	if err == nil || !strings.Contains(err.Error(), "refused: network.serviceCIDR") {
		t.Fatalf("a new service range: %v", err)
	}
}

// URNs spell the project's name: the one Pulumi.yaml gives.
func TestProjectIsPulumis(t *testing.T) {
	data, err := os.ReadFile(filepath.Join("..", "..", "Pulumi.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(data), "\nname: "+program.Project+"\n") && !strings.HasPrefix(string(data), "name: "+program.Project+"\n") {
		t.Errorf("Pulumi.yaml does not name the project %q:\n%s", program.Project, data)
	}
}

// A roll holds every worker pool's scale-set model as applied until its canary passes: the
// models step moves the control plane's models alone, a models step naming the canary's pool
// moves that pool's, and the roll's end records every pool as desired.
func TestRollHoldsWorkerModelsUntilTheCanary(t *testing.T) {
	before, err := Run("edited", stackFile("dev"), nil)
	if err != nil {
		t.Fatal(err)
	}
	path, prev := editedDev(t, "vmSize: Standard_D4ds_v5", "vmSize: Standard_D8ds_v5")
	cpu := spec.WorkerRole("cpu")
	for _, step := range []struct {
		step  string
		moved bool
	}{
		{program.RollModels, false},
		{program.RollMember + "cf-dev-etcd-main-0", false},
		{program.ModelsStep([]string{"gpu"}), false},
		{program.ModelsStep([]string{"cpu"}), true},
		{program.ModelsStep([]string{"cpu", "gpu"}), true},
		{program.RollDone, true},
	} {
		r, err := RunAfter("edited", path, nil, program.Previous{AppliedSpec: prev.AppliedSpec, RollStep: step.step})
		if err != nil {
			t.Fatalf("%s: %v", step.step, err)
		}
		want, data := "Standard_D4ds_v5", before.UserData[cpu]
		if step.moved {
			want = "Standard_D8ds_v5"
		}
		for _, s := range byType(r, "azure-native:compute:VirtualMachineScaleSet") {
			if role(s) != cpu {
				continue
			}
			if got := field(s.Inputs, "sku", "name"); got != want {
				t.Errorf("step %s: %s's model is %v, want %s", step.step, s.Name, got, want)
			}
		}
		if same := r.UserData[cpu] == data; same == step.moved {
			t.Errorf("step %s: the cpu pool's user data is the applied one: %v, want %v", step.step, same, !step.moved)
		}
	}
}

// Azure takes 50 tags a resource: a pool whose nodes' labels and taints would need more node-template
// tags on its scale sets is refused at plan time, naming the pool, not by Azure halfway through an up.
func TestScaleSetTagsWithinAzuresLimit(t *testing.T) {
	var labels strings.Builder
	labels.WriteString("        labels:\n")
	for i := range 48 {
		fmt.Fprintf(&labels, "          example.com/l%d: \"x\"\n", i)
	}
	for n, want := range map[int]bool{46: true, 47: false} {
		edited := strings.Join(strings.SplitAfter(labels.String(), "\n")[:n+1], "")
		path, _ := editedDev(t, "        maxNodes: 5\n        vnets: [10.3.0.0/16]", "        maxNodes: 5\n"+edited+"        vnets: [10.3.0.0/16]")
		_, err := Run("dev", path, nil)
		if ok := err == nil; ok != want || !ok && !strings.Contains(err.Error(), "pool cpu2: its scale sets would carry 51 tags") {
			t.Errorf("cpu2 with %d labels: %v, want planned %v", n, err, want)
		}
	}
	// Azure's tag names ignore case: two label keys that differ only in it would be one tag.
	path, _ := editedDev(t, "        maxNodes: 5\n        vnets: [10.3.0.0/16]",
		"        maxNodes: 5\n        labels:\n          example.com/Team: \"a\"\n          example.com/team: \"b\"\n        vnets: [10.3.0.0/16]")
	if _, err := Run("dev", path, nil); err == nil || !strings.Contains(err.Error(), "pool cpu2: its labels or taints") {
		t.Errorf("cpu2 with labels differing only in case: %v, want refused", err)
	}
}
