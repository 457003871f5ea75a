package scaleset

import (
	"context"
	"net/http"
	"testing"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore"
	"github.com/Azure/azure-sdk-for-go/sdk/azcore/arm"
	azfake "github.com/Azure/azure-sdk-for-go/sdk/azcore/fake"
	"github.com/Azure/azure-sdk-for-go/sdk/azcore/to"
	"github.com/Azure/azure-sdk-for-go/sdk/resourcemanager/compute/armcompute/v6"
	computefake "github.com/Azure/azure-sdk-for-go/sdk/resourcemanager/compute/armcompute/v6/fake"
)

// The repairs' state is read from the scale set's instance view on the SDK's fake server: its
// AutomaticRepairs service, suspended or running; a view without it or a refusal is unknown.
func TestRepairsStateReadsTheInstanceView(t *testing.T) {
	for _, tc := range []struct {
		name     string
		services []*armcompute.OrchestrationServiceSummary
		status   int
		want     int32
	}{
		{"suspended", []*armcompute.OrchestrationServiceSummary{{ServiceName: to.Ptr(armcompute.OrchestrationServiceNamesAutomaticRepairs), ServiceState: to.Ptr(armcompute.OrchestrationServiceStateSuspended)}}, http.StatusOK, RepairsSuspended},
		{"running", []*armcompute.OrchestrationServiceSummary{{ServiceName: to.Ptr(armcompute.OrchestrationServiceNamesAutomaticRepairs), ServiceState: to.Ptr(armcompute.OrchestrationServiceStateRunning)}}, http.StatusOK, RepairsRunning},
		{"no repairs service", nil, http.StatusOK, RepairsUnknown},
		{"refused", nil, http.StatusForbidden, RepairsUnknown},
	} {
		t.Run(tc.name, func(t *testing.T) {
			srv := computefake.VirtualMachineScaleSetsServer{
				GetInstanceView: func(_ context.Context, rg, name string, _ *armcompute.VirtualMachineScaleSetsClientGetInstanceViewOptions) (resp azfake.Responder[armcompute.VirtualMachineScaleSetsClientGetInstanceViewResponse], errResp azfake.ErrorResponder) {
					if rg != "rg" || name != "cf-apiserver" {
						t.Errorf("read %s/%s, want rg/cf-apiserver", rg, name)
					}
					if tc.status != http.StatusOK {
						errResp.SetResponseError(tc.status, "AuthorizationFailed")
						return
					}
					resp.SetResponse(http.StatusOK, armcompute.VirtualMachineScaleSetsClientGetInstanceViewResponse{
						VirtualMachineScaleSetInstanceView: armcompute.VirtualMachineScaleSetInstanceView{OrchestrationServices: tc.services}}, nil)
					return
				},
			}
			client, err := armcompute.NewVirtualMachineScaleSetsClient("sub", &azfake.TokenCredential{},
				&arm.ClientOptions{ClientOptions: azcore.ClientOptions{Transport: computefake.NewVirtualMachineScaleSetsServerTransport(&srv)}})
			if err != nil {
				t.Fatal(err)
			}
			got, err := RepairsState(context.Background(), client, "rg", "cf-apiserver")
			if got != tc.want || (err != nil) != (tc.want == RepairsUnknown) {
				t.Errorf("state %d, %v; want %d", got, err, tc.want)
			}
		})
	}
}
