package scaleset

import (
	"context"
	"fmt"
	"log"
	"sync/atomic"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore"
	"github.com/Azure/azure-sdk-for-go/sdk/resourcemanager/compute/armcompute/v6"
)

// Repairs states as WatchRepairs stores them.
const (
	RepairsUnknown   int32 = -1
	RepairsRunning   int32 = 0
	RepairsSuspended int32 = 1
)

// RepairsState reads whether scaleSet's automatic repairs service runs, from its instance view.
func RepairsState(ctx context.Context, client *armcompute.VirtualMachineScaleSetsClient, resourceGroup, scaleSet string) (int32, error) {
	view, err := client.GetInstanceView(ctx, resourceGroup, scaleSet, nil)
	if err != nil {
		return RepairsUnknown, err
	}
	for _, s := range view.OrchestrationServices {
		if s.ServiceName == nil || *s.ServiceName != armcompute.OrchestrationServiceNamesAutomaticRepairs || s.ServiceState == nil {
			continue
		}
		if *s.ServiceState == armcompute.OrchestrationServiceStateSuspended {
			return RepairsSuspended, nil
		}
		return RepairsRunning, nil
	}
	return RepairsUnknown, fmt.Errorf("scale set %s's instance view names no %s service", scaleSet, armcompute.OrchestrationServiceNamesAutomaticRepairs)
}

// WatchRepairs stores scaleSet's repairs state every interval until ctx ends (RepairsUnknown while
// it cannot be read): a restore or a roll suspends them, and a suspension nobody lifts leaves a dead
// apiserver dead. One credential serves every read; the SDK renews its token.
func WatchRepairs(ctx context.Context, a *Access, scaleSet string, every time.Duration, state *atomic.Int32) {
	var client *armcompute.VirtualMachineScaleSetsClient
	for {
		got, err := RepairsUnknown, error(nil)
		if client == nil {
			var cred azcore.TokenCredential
			if cred, err = a.credential(); err == nil {
				client, err = a.ScaleSetsAs(cred)
			}
		}
		if err == nil {
			got, err = RepairsState(ctx, client, a.ResourceGroup, scaleSet)
		}
		if err != nil {
			log.Printf("azure: cannot read whether scale set %s's automatic repairs run: %v", scaleSet, err)
		}
		if prev := state.Swap(got); prev != got && got == RepairsSuspended {
			log.Printf("azure: scale set %s's automatic repairs are suspended", scaleSet)
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(every):
		}
	}
}
