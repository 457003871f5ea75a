// Package scaleset removes a node's machine from its Azure scale set: the remediation
// controller's Machines on Azure.
package scaleset

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"regexp"
	"slices"
	"strings"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore"
	"github.com/Azure/azure-sdk-for-go/sdk/resourcemanager/compute/armcompute/v6"
	corev1 "k8s.io/api/core/v1"
)

// instanceID is a scale-set VM's provider ID as the kubelet registers it (azure://<resource id>).
var instanceID = regexp.MustCompile(`^azure:///subscriptions/([0-9a-fA-F-]{36})/resourceGroups/([-\w._()]{1,90})/providers/Microsoft\.Compute/virtualMachineScaleSets/([-\w.]{1,64})/virtualMachines/([0-9]{1,10})$`)

// Instance is one scale-set VM.
type Instance struct {
	Subscription, ResourceGroup, ScaleSet, ID string
}

// ParseProviderID reads a node's provider ID; anything but a scale-set VM's is an error.
func ParseProviderID(providerID string) (Instance, error) {
	m := instanceID.FindStringSubmatch(providerID)
	if m == nil {
		return Instance{}, fmt.Errorf("provider ID %q is not a scale-set VM's (azure:///subscriptions/<id>/resourceGroups/<rg>/providers/Microsoft.Compute/virtualMachineScaleSets/<set>/virtualMachines/<n>)", providerID)
	}
	return Instance{Subscription: m[1], ResourceGroup: m[2], ScaleSet: m[3], ID: m[4]}, nil
}

// Machines deletes scale-set instances of one cluster. A node's provider ID is the kubelet's own
// claim, so it is checked three ways before anything is deleted: the resource group and scale set
// must be the cluster's pools', and the instance's computer name must be the node's name.
type Machines struct {
	VMs           *armcompute.VirtualMachineScaleSetVMsClient
	Subscription  string
	ResourceGroup string
	// ScaleSets are the worker pools' scale sets; control-plane machines are never removed here.
	ScaleSets []string
}

// Remove deletes the node's instance and waits for the deletion; an instance already gone is done.
func (m *Machines) Remove(ctx context.Context, node *corev1.Node) error {
	in, err := ParseProviderID(node.Spec.ProviderID)
	if err != nil {
		return err
	}
	if !strings.EqualFold(in.Subscription, m.Subscription) || !strings.EqualFold(in.ResourceGroup, m.ResourceGroup) || !slices.Contains(m.ScaleSets, in.ScaleSet) {
		return fmt.Errorf("node %s names %s/%s/%s, not one of this cluster's worker scale sets %v in %s", node.Name, in.Subscription, in.ResourceGroup, in.ScaleSet, m.ScaleSets, m.ResourceGroup)
	}
	vm, err := m.VMs.Get(ctx, in.ResourceGroup, in.ScaleSet, in.ID, nil)
	if notFound(err) {
		return nil
	}
	if err != nil {
		return err
	}
	if name := computerName(&vm.VirtualMachineScaleSetVM); !strings.EqualFold(name, node.Name) {
		return fmt.Errorf("node %s names instance %s of %s, whose computer name is %q: not removed", node.Name, in.ID, in.ScaleSet, name)
	}
	poller, err := m.VMs.BeginDelete(ctx, in.ResourceGroup, in.ScaleSet, in.ID, nil)
	if notFound(err) {
		return nil
	}
	if err != nil {
		return err
	}
	_, err = poller.PollUntilDone(ctx, nil)
	return err
}

func computerName(vm *armcompute.VirtualMachineScaleSetVM) string {
	if vm.Properties == nil || vm.Properties.OSProfile == nil || vm.Properties.OSProfile.ComputerName == nil {
		return ""
	}
	return *vm.Properties.OSProfile.ComputerName
}

func notFound(err error) bool {
	var re *azcore.ResponseError
	return errors.As(err, &re) && re.StatusCode == http.StatusNotFound
}
