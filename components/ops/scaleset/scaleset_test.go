package scaleset

import (
	"context"
	"errors"
	"net/http"
	"net/netip"
	"strings"
	"testing"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore"
	"github.com/Azure/azure-sdk-for-go/sdk/azcore/arm"
	azfake "github.com/Azure/azure-sdk-for-go/sdk/azcore/fake"
	"github.com/Azure/azure-sdk-for-go/sdk/azcore/to"
	"github.com/Azure/azure-sdk-for-go/sdk/resourcemanager/compute/armcompute/v6"
	computefake "github.com/Azure/azure-sdk-for-go/sdk/resourcemanager/compute/armcompute/v6/fake"
	"github.com/Azure/azure-sdk-for-go/sdk/resourcemanager/network/armnetwork/v6"
	networkfake "github.com/Azure/azure-sdk-for-go/sdk/resourcemanager/network/armnetwork/v6/fake"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

const sub = "00000000-0000-0000-0000-000000000001"

func providerID(rg, set, id string) string {
	return "azure:///subscriptions/" + sub + "/resourceGroups/" + rg + "/providers/Microsoft.Compute/virtualMachineScaleSets/" + set + "/virtualMachines/" + id
}

// machines is Machines over the SDK's fake ARM server: instances 3 (cf-dev-cpu000003) and 4
// (cf-dev-cpu000004) of cf-dev-cpu exist; deleted records the deletions.
func machines(t *testing.T) (*Machines, *[]string) {
	var deleted []string
	computers := map[string]string{"3": "cf-dev-cpu000003", "4": "cf-dev-cpu000004"}
	srv := computefake.VirtualMachineScaleSetVMsServer{
		Get: func(_ context.Context, rg, set, id string, _ *armcompute.VirtualMachineScaleSetVMsClientGetOptions) (resp azfake.Responder[armcompute.VirtualMachineScaleSetVMsClientGetResponse], errResp azfake.ErrorResponder) {
			name, ok := computers[id]
			if !ok || set != "cf-dev-cpu" {
				errResp.SetResponseError(http.StatusNotFound, "NotFound")
				return resp, errResp
			}
			resp.SetResponse(http.StatusOK, armcompute.VirtualMachineScaleSetVMsClientGetResponse{VirtualMachineScaleSetVM: armcompute.VirtualMachineScaleSetVM{
				InstanceID: to.Ptr(id), Properties: &armcompute.VirtualMachineScaleSetVMProperties{OSProfile: &armcompute.OSProfile{ComputerName: to.Ptr(name)}}}}, nil)
			return resp, errResp
		},
		BeginDelete: func(_ context.Context, rg, set, id string, _ *armcompute.VirtualMachineScaleSetVMsClientBeginDeleteOptions) (resp azfake.PollerResponder[armcompute.VirtualMachineScaleSetVMsClientDeleteResponse], errResp azfake.ErrorResponder) {
			deleted = append(deleted, rg+"/"+set+"/"+id)
			delete(computers, id)
			resp.SetTerminalResponse(http.StatusOK, armcompute.VirtualMachineScaleSetVMsClientDeleteResponse{}, nil)
			return resp, errResp
		},
	}
	client, err := armcompute.NewVirtualMachineScaleSetVMsClient(sub, &azfake.TokenCredential{},
		&arm.ClientOptions{ClientOptions: azcore.ClientOptions{Transport: computefake.NewVirtualMachineScaleSetVMsServerTransport(&srv)}})
	if err != nil {
		t.Fatal(err)
	}
	return &Machines{VMs: client, Subscription: sub, ResourceGroup: "cf-dev", ScaleSets: []string{"cf-dev-cpu", "cf-dev-gpu"}}, &deleted
}

func node(name, providerID string) *corev1.Node {
	return &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: corev1.NodeSpec{ProviderID: providerID}}
}

func TestRemoveDeletesTheNodesOwnInstanceOnce(t *testing.T) {
	m, deleted := machines(t)
	n := node("cf-dev-cpu000003", providerID("cf-dev", "cf-dev-cpu", "3"))
	for range 2 { // the second finds it gone
		if err := m.Remove(context.Background(), n); err != nil {
			t.Fatal(err)
		}
	}
	if len(*deleted) != 1 || (*deleted)[0] != "cf-dev/cf-dev-cpu/3" {
		t.Errorf("deleted %v, want cf-dev/cf-dev-cpu/3 once", *deleted)
	}
}

func TestRemoveRefusesAProviderIDThatIsNotTheNodesOwn(t *testing.T) {
	m, deleted := machines(t)
	for _, tc := range []struct {
		node *corev1.Node
		want string
	}{
		{node("cf-dev-cpu000003", providerID("cf-dev", "cf-dev-cpu", "4")), `whose computer name is "cf-dev-cpu000004"`},
		{node("cf-dev-cpu000003", providerID("other-rg", "cf-dev-cpu", "3")), "not one of this cluster's worker scale sets"},
		{node("cf-dev-apiserver000000", providerID("cf-dev", "cf-dev-apiserver", "0")), "not one of this cluster's worker scale sets"},
		{node("cf-dev-cpu000003", "azure:///subscriptions/"+sub+"/resourceGroups/cf-dev/providers/Microsoft.Compute/virtualMachines/cf-dev-etcd-main-0"), "is not a scale-set VM's"},
		{node("cf-dev-cpu000003", providerID("cf-dev", "cf-dev-cpu", "3")+"/../4"), "is not a scale-set VM's"},
		{node("cf-dev-cpu000003", ""), "is not a scale-set VM's"},
	} {
		err := m.Remove(context.Background(), tc.node)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("Remove(%s, %s) = %v, want an error containing %q", tc.node.Name, tc.node.Spec.ProviderID, err, tc.want)
		}
	}
	if len(*deleted) != 0 {
		t.Errorf("deleted %v", *deleted)
	}
}

func TestParseProviderIDReadsAScaleSetVM(t *testing.T) {
	in, err := ParseProviderID(providerID("cf-prod-2500", "cf-prod-2500-gpu", "1042"))
	if err != nil || in != (Instance{sub, "cf-prod-2500", "cf-prod-2500-gpu", "1042"}) {
		t.Errorf("ParseProviderID = %+v, %v", in, err)
	}
}

// An instance's addresses are its interface's primary IP configuration's, never the secondary
// ones Azure CNI gives its pods; and only once the instance is the node's.
func TestAddressesAreTheInstancesPrimaryOnly(t *testing.T) {
	m, _ := machines(t)
	ipConfig := func(ip string, primary bool) *armnetwork.InterfaceIPConfiguration {
		return &armnetwork.InterfaceIPConfiguration{Properties: &armnetwork.InterfaceIPConfigurationPropertiesFormat{PrivateIPAddress: to.Ptr(ip), Primary: to.Ptr(primary)}}
	}
	srv := networkfake.InterfacesServer{
		NewListVirtualMachineScaleSetVMNetworkInterfacesPager: func(rg, set, id string, _ *armnetwork.InterfacesClientListVirtualMachineScaleSetVMNetworkInterfacesOptions) (resp azfake.PagerResponder[armnetwork.InterfacesClientListVirtualMachineScaleSetVMNetworkInterfacesResponse]) {
			resp.AddPage(http.StatusOK, armnetwork.InterfacesClientListVirtualMachineScaleSetVMNetworkInterfacesResponse{InterfaceListResult: armnetwork.InterfaceListResult{
				Value: []*armnetwork.Interface{{Properties: &armnetwork.InterfacePropertiesFormat{IPConfigurations: []*armnetwork.InterfaceIPConfiguration{
					ipConfig("10.1.0."+id, true), ipConfig("10.1.1."+id, false), ipConfig("10.1.2."+id, false)}}}}}}, nil)
			return resp
		},
	}
	nics, err := armnetwork.NewInterfacesClient(sub, &azfake.TokenCredential{},
		&arm.ClientOptions{ClientOptions: azcore.ClientOptions{Transport: networkfake.NewInterfacesServerTransport(&srv)}})
	if err != nil {
		t.Fatal(err)
	}
	m.NICs = nics
	addrs, err := m.Addresses(context.Background(), providerID("cf-dev", "cf-dev-cpu", "3"), "cf-dev-cpu000003")
	if err != nil || len(addrs) != 1 || addrs[0] != netip.MustParseAddr("10.1.0.3") {
		t.Errorf("Addresses = %v, %v; want [10.1.0.3]", addrs, err)
	}
	if _, err := m.Addresses(context.Background(), providerID("cf-dev", "cf-dev-cpu", "4"), "cf-dev-cpu000003"); !errors.Is(err, ErrNotClusterInstance) {
		t.Errorf("another node's instance: %v, want ErrNotClusterInstance", err)
	}
}
