// Package scaleset removes a node's machine from its Azure scale set: the remediation
// controller's Machines on Azure.
package scaleset

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/netip"
	"regexp"
	"slices"
	"strings"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore"
	"github.com/Azure/azure-sdk-for-go/sdk/resourcemanager/compute/armcompute/v6"
	"github.com/Azure/azure-sdk-for-go/sdk/resourcemanager/network/armnetwork/v6"
	corev1 "k8s.io/api/core/v1"
)

// ProviderIDPrefix begins a node's provider ID, its VM's resource ID following.
const ProviderIDPrefix = "azure://"

// instanceID is a scale-set VM's provider ID as the kubelet registers it (azure://<resource id>).
var instanceID = regexp.MustCompile(`^azure:///subscriptions/([0-9a-fA-F-]{36})/resourceGroups/([-\w._()]{1,90})/providers/Microsoft\.Compute/virtualMachineScaleSets/([-\w.]{1,64})/virtualMachines/([0-9]{1,10})$`)

// ErrNotClusterInstance is a claim of an instance that is not the cluster's worker of that name:
// another scale set, another computer name, or no such instance.
var ErrNotClusterInstance = errors.New("not this cluster's worker")

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
	VMs *armcompute.VirtualMachineScaleSetVMsClient
	// NICs reads instances' network interfaces (Addresses); nil where nothing asks.
	NICs          *armnetwork.InterfacesClient
	Subscription  string
	ResourceGroup string
	// ScaleSets are the worker pools' scale sets; control-plane machines are never removed here.
	ScaleSets []string
}

// Remove deletes the node's instance and waits for the deletion; an instance already gone is done.
func (m *Machines) Remove(ctx context.Context, node *corev1.Node) error {
	in, vm, err := m.lookup(ctx, node.Spec.ProviderID, node.Name)
	if err != nil || vm == nil {
		return err
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

// Record is what Resource Manager says of an instance that decides whether it may be a node:
// its unique id, the image and extensions of the model it runs (a write of the scale set's model
// changes them for the instances created or upgraded after it), and where it is.
type Record struct {
	// VMID is Azure's unique id of the instance, the one its attested documents name.
	VMID string
	// Image is the id of the image the instance booted.
	Image string
	// Extensions are the names of the extensions its model runs on it.
	Extensions []string
	// Zone is its availability zone ("" when the scale set has none) and Location its region.
	Zone, Location string
}

// Record reads the instance a node named name claims by its provider ID, checked as Remove
// checks.
func (m *Machines) Record(ctx context.Context, providerID, name string) (Record, error) {
	in, vm, err := m.lookup(ctx, providerID, name)
	switch {
	case err != nil:
		return Record{}, err
	case vm == nil:
		return Record{}, fmt.Errorf("instance %s of %s does not exist: %w", in.ID, in.ScaleSet, ErrNotClusterInstance)
	case vm.Properties == nil || vm.Properties.VMID == nil:
		return Record{}, fmt.Errorf("instance %s of %s has no vmId", in.ID, in.ScaleSet)
	}
	r := Record{VMID: *vm.Properties.VMID}
	if sp := vm.Properties.StorageProfile; sp != nil && sp.ImageReference != nil && sp.ImageReference.ID != nil {
		r.Image = *sp.ImageReference.ID
	}
	for _, e := range vm.Resources {
		if e != nil && e.Name != nil {
			r.Extensions = append(r.Extensions, *e.Name)
		}
	}
	if len(vm.Zones) > 0 && vm.Zones[0] != nil {
		r.Zone = *vm.Zones[0]
	}
	if vm.Location != nil {
		r.Location = *vm.Location
	}
	return r, nil
}

// Addresses are the private addresses of the primary IP configurations of the network interfaces
// of the instance a node named name claims by its provider ID, checked as Remove checks: the
// instance's own addresses as Resource Manager assigned them, not its pods' (Azure CNI gives
// those secondary IP configurations of the same interface).
func (m *Machines) Addresses(ctx context.Context, providerID, name string) ([]netip.Addr, error) {
	in, vm, err := m.lookup(ctx, providerID, name)
	switch {
	case err != nil:
		return nil, err
	case vm == nil:
		return nil, fmt.Errorf("instance %s of %s does not exist: %w", in.ID, in.ScaleSet, ErrNotClusterInstance)
	}
	var addrs []netip.Addr
	pager := m.NICs.NewListVirtualMachineScaleSetVMNetworkInterfacesPager(in.ResourceGroup, in.ScaleSet, in.ID, nil)
	for pager.More() {
		page, err := pager.NextPage(ctx)
		if err != nil {
			return nil, err
		}
		for _, nic := range page.Value {
			if nic.Properties == nil {
				continue
			}
			for _, ip := range nic.Properties.IPConfigurations {
				if ip.Properties == nil || ip.Properties.Primary == nil || !*ip.Properties.Primary || ip.Properties.PrivateIPAddress == nil {
					continue
				}
				addr, err := netip.ParseAddr(*ip.Properties.PrivateIPAddress)
				if err != nil {
					return nil, fmt.Errorf("instance %s of %s: %w", in.ID, in.ScaleSet, err)
				}
				addrs = append(addrs, addr)
			}
		}
	}
	return addrs, nil
}

// lookup reads the instance providerID names, once it is one of the cluster's worker scale sets'
// and its computer name is name; vm is nil when it does not exist.
func (m *Machines) lookup(ctx context.Context, providerID, name string) (Instance, *armcompute.VirtualMachineScaleSetVM, error) {
	in, err := ParseProviderID(providerID)
	if err != nil {
		return in, nil, fmt.Errorf("%w: %w", err, ErrNotClusterInstance)
	}
	if !strings.EqualFold(in.Subscription, m.Subscription) || !strings.EqualFold(in.ResourceGroup, m.ResourceGroup) || !slices.Contains(m.ScaleSets, in.ScaleSet) {
		return in, nil, fmt.Errorf("node %s names %s/%s/%s, not one of this cluster's worker scale sets %v in %s: %w", name, in.Subscription, in.ResourceGroup, in.ScaleSet, m.ScaleSets, m.ResourceGroup, ErrNotClusterInstance)
	}
	vm, err := m.VMs.Get(ctx, in.ResourceGroup, in.ScaleSet, in.ID, nil)
	switch {
	case notFound(err):
		return in, nil, nil
	case forbidden(err): // each worker scale set grants its readers; the others do not
		return in, nil, fmt.Errorf("%w: %w", err, ErrNotClusterInstance)
	case err != nil:
		return in, nil, err
	}
	if got := computerName(&vm.VirtualMachineScaleSetVM); strings.ToLower(got) != name { // node names are the computer names, lowercased
		return in, nil, fmt.Errorf("node %s names instance %s of %s, whose computer name is %q: %w", name, in.ID, in.ScaleSet, got, ErrNotClusterInstance)
	}
	return in, &vm.VirtualMachineScaleSetVM, nil
}

func computerName(vm *armcompute.VirtualMachineScaleSetVM) string {
	if vm.Properties == nil || vm.Properties.OSProfile == nil || vm.Properties.OSProfile.ComputerName == nil {
		return ""
	}
	return *vm.Properties.OSProfile.ComputerName
}

func notFound(err error) bool  { return statusIs(err, http.StatusNotFound) }
func forbidden(err error) bool { return statusIs(err, http.StatusForbidden) }

func statusIs(err error, code int) bool {
	var re *azcore.ResponseError
	return errors.As(err, &re) && re.StatusCode == code
}
