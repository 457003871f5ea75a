package dataplane

import (
	"context"
	"fmt"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore/to"
	"github.com/Azure/azure-sdk-for-go/sdk/resourcemanager/compute/armcompute/v6"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"

	"github.com/clusterforge/clusterforge/components/addons"
	"github.com/clusterforge/clusterforge/components/machine"
	"github.com/clusterforge/clusterforge/components/nodestatus"
	"github.com/clusterforge/clusterforge/components/spec"
	"github.com/clusterforge/clusterforge/components/wellknown"
	"github.com/clusterforge/clusterforge/test/drills"
	"github.com/clusterforge/clusterforge/test/e2e/framework"
	"github.com/clusterforge/clusterforge/test/machines"
)

// ScaleSetGrowthBootsAWorkerThatJoins makes cluster-autoscaler's scale-up call as it makes it (the
// scale set read, then written whole with one more instance, If-Match its ETag, as its identity)
// through Resource Manager's stand-in: the new instance becomes a booted machine that joins as an
// Azure VM does (attested, labelled by the CSR approver), named, identified and addressed as
// Resource Manager says, and registers the node its scale set's node-template tags describe. The
// autoscaler's scale-down call (the instance deleted) removes the machine.
func ScaleSetGrowthBootsAWorkerThatJoins(t *testing.T) {
	framework.NeedBoot(t)
	ctx, cancel := context.WithTimeout(context.Background(), 8*time.Minute)
	defer cancel()
	b := framework.Booted
	c := b.Cluster
	// A teams' CPU pool: a GPU pool's template names GPUs no machine here has.
	i := slices.IndexFunc(c.ScaleSets(), func(s spec.ScaleSet) bool { return !s.Pool.System && !s.Pool.IsGPU() })
	if i < 0 {
		t.Fatal("the stack has no teams' CPU pool to grow")
	}
	setName := c.ScaleSets()[i].AzureName
	factory, err := b.ComputeAs(machines.RehearsalClientIDs()[addons.AutoscalerName])
	if err != nil {
		t.Fatal(err)
	}
	sets, vms := factory.NewVirtualMachineScaleSetsClient(), factory.NewVirtualMachineScaleSetVMsClient()
	before := instances(t, ctx, vms, c.ResourceGroup(), setName)

	set, err := sets.Get(ctx, c.ResourceGroup(), setName, nil)
	if err != nil {
		t.Fatalf("the autoscaler reading %s: %v", setName, err)
	}
	grown := set.VirtualMachineScaleSet
	grown.SKU.Capacity = to.Ptr(*set.SKU.Capacity + 1)
	began := time.Now()
	poller, err := sets.BeginCreateOrUpdate(ctx, c.ResourceGroup(), setName, grown, &armcompute.VirtualMachineScaleSetsClientBeginCreateOrUpdateOptions{IfMatch: set.Etag})
	if err != nil {
		t.Fatalf("the autoscaler growing %s: %v", setName, err)
	}
	if _, err := poller.PollUntilDone(ctx, nil); err != nil {
		t.Fatalf("growing %s: %v", setName, err)
	}
	var added *armcompute.VirtualMachineScaleSetVM
	for _, vm := range instances(t, ctx, vms, c.ResourceGroup(), setName) {
		if !slices.ContainsFunc(before, func(x *armcompute.VirtualMachineScaleSetVM) bool { return *x.InstanceID == *vm.InstanceID }) {
			added = vm
		}
	}
	if added == nil {
		t.Fatalf("%s grew to %d, yet lists no new instance", setName, *set.SKU.Capacity+1)
	}
	name := *added.Properties.OSProfile.ComputerName
	removed := false
	t.Cleanup(func() { // a failure past here leaves no grown worker to the scenarios after
		if removed {
			return
		}
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
		defer cancel()
		if del, err := sets.BeginDeleteInstances(ctx, c.ResourceGroup(), setName, armcompute.VirtualMachineScaleSetVMInstanceRequiredIDs{InstanceIDs: []*string{added.InstanceID}}, nil); err == nil {
			_, _ = del.PollUntilDone(ctx, nil)
		}
		_ = framework.AsIn(t, b.Layout, rest.ImpersonationConfig{UserName: "drill-operator", Groups: []string{wellknown.BreakGlassGroup}}).CoreV1().Nodes().Delete(ctx, name, metav1.DeleteOptions{})
	})
	t.Logf("%s grew by instance %s (%s), created in %s", setName, *added.InstanceID, name, time.Since(began).Round(time.Second))

	cs := drills.Clientset(t, b)
	var node *corev1.Node
	if err := machines.Poll(ctx, 4*time.Minute, name+" Ready", func(ctx context.Context) error {
		n, err := cs.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		if n.Labels[wellknown.PoolLabel] == "" {
			return fmt.Errorf("no %s label yet", wellknown.PoolLabel)
		}
		node = n
		return nodestatus.Ready(n, time.Now())
	}); err != nil {
		t.Fatalf("%v\n%s", err, b.Diagnose(name, machine.KubeletUnit))
	}
	t.Logf("%s joined and is Ready %s after the scale-up began", name, time.Since(began).Round(time.Second))
	if want := "azure://" + *added.ID; !strings.EqualFold(node.Spec.ProviderID, want) {
		t.Errorf("%s registered as %s; Resource Manager's instance is %s", name, node.Spec.ProviderID, want)
	}
	m, err := b.Machine(name)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.ContainsFunc(node.Status.Addresses, func(a corev1.NodeAddress) bool {
		return a.Type == corev1.NodeInternalIP && a.Address == m.Address
	}) {
		t.Errorf("%s's addresses %v lack its NIC's %s", name, node.Status.Addresses, m.Address)
	}
	if vmID := *added.Properties.VMID; m.VMID != vmID {
		t.Errorf("%s's machine says vmId %s; Resource Manager gave it %s", name, m.VMID, vmID)
	}
	for _, mismatch := range templateMismatches(c, node, &set.VirtualMachineScaleSet) {
		t.Error(mismatch)
	}

	// The scale-down's call: the instance deleted, its machine with it. Nothing here deletes a
	// gone instance's Node (cloud-provider-azure's node lifecycle controller does on Azure): the
	// operator removes it, past the brake.
	del, err := sets.BeginDeleteInstances(ctx, c.ResourceGroup(), setName, armcompute.VirtualMachineScaleSetVMInstanceRequiredIDs{InstanceIDs: []*string{added.InstanceID}}, nil)
	if err != nil {
		t.Fatalf("the autoscaler deleting %s: %v", name, err)
	}
	if _, err := del.PollUntilDone(ctx, nil); err != nil {
		t.Fatalf("deleting %s: %v", name, err)
	}
	removed = true
	if _, err := b.Machine(name); err == nil {
		t.Errorf("%s's instance is deleted, yet its machine is still here", name)
	}
	if _, err := os.Stat(m.Root); err == nil {
		t.Errorf("%s's OS disk %s is still here", name, m.Root)
	}
	operator := framework.AsIn(t, b.Layout, rest.ImpersonationConfig{UserName: "drill-operator", Groups: []string{wellknown.BreakGlassGroup}})
	if err := operator.CoreV1().Nodes().Delete(ctx, name, metav1.DeleteOptions{}); err != nil {
		t.Errorf("removing %s's Node: %v", name, err)
	}
}

// instances lists a scale set's instances as the autoscaler does.
func instances(t *testing.T, ctx context.Context, vms *armcompute.VirtualMachineScaleSetVMsClient, group, set string) []*armcompute.VirtualMachineScaleSetVM {
	t.Helper()
	var out []*armcompute.VirtualMachineScaleSetVM
	pager := vms.NewListPager(group, set, nil)
	for pager.More() {
		page, err := pager.NextPage(ctx)
		if err != nil {
			t.Fatalf("listing %s's instances: %v", set, err)
		}
		out = append(out, page.Value...)
	}
	return out
}
