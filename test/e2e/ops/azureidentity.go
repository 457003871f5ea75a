package ops

import (
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/clusterforge/clusterforge/components/addons"
	"github.com/clusterforge/clusterforge/components/spec"
	"github.com/clusterforge/clusterforge/components/wellknown"
	"github.com/clusterforge/clusterforge/test/drills"
	"github.com/clusterforge/clusterforge/test/e2e/framework"
	"github.com/clusterforge/clusterforge/test/machines"
	"github.com/clusterforge/clusterforge/test/standin/arm"
)

// Both clusterforge-ops replicas sign in to Azure at start through their workload identity: the
// Azure SDK in each pod trades its projected service-account token, signed by the booted
// apiservers, at Entra ID's stand-in (deviation "Entra ID"), which checks it against the issuer's
// published keys and the federated credentials the Pulumi program creates. Nothing else was
// given a token. With that token each reads its worker scale set at Resource Manager's stand-in
// (deviation "Resource Manager"), reached under Azure's public names through Azure DNS's stand-in, and
// authorized by the role assignments the Pulumi program makes; and each reads whether the apiserver
// scale set's automatic repairs run (APIServerRepairsSuspended). (cluster-autoscaler runs at zero
// replicas here: deviation "add-ons".)
func OpsSignsInToAzure(t *testing.T) {
	framework.NeedBoot(t)
	opsClient, approverClient := machines.RehearsalClientIDs()[wellknown.OpsName], machines.RehearsalClientIDs()[spec.RoleAPIServer]
	if err := drills.WaitUntil(3*time.Minute, func() error {
		exchanges, err := framework.Booted.EntraExchanges()
		if err != nil {
			return err
		}
		issued := 0
		for _, e := range exchanges {
			switch {
			case e.Refused == "" && (e.ClientID != opsClient || e.Subject != addons.FederatedSubject(wellknown.OpsName)):
				return fmt.Errorf("a token went to %s as %s", e.Subject, e.ClientID)
			case e.Refused == "":
				issued++
			}
		}
		if issued < 2 {
			return fmt.Errorf("%d of 2 clusterforge-ops replicas signed in; exchanges: %+v", issued, exchanges)
		}
		calls, err := framework.Booted.ARMCalls()
		if err != nil {
			return err
		}
		read, repairsRead := 0, 0
		for _, c := range calls {
			switch {
			case c.Client == approverClient: // the CSR approver's reads: TestJoinNeedsTheInstancesAttestedDocument
			case c.Client == machines.RehearsalOperatorID || c.Client == arm.RepairsClient: // TestFailedAPIServerIsRepairedByItsScaleSet
			case c.Client != opsClient:
				return fmt.Errorf("Resource Manager was called by %q: %+v", c.Client, c)
			case c.Status != http.StatusOK:
				return fmt.Errorf("Resource Manager refused clusterforge-ops: %+v", c)
			case c.Action == "Microsoft.Compute/virtualMachineScaleSets/virtualMachines/read":
				read++
			case c.Action == "Microsoft.Compute/virtualMachineScaleSets/read" && strings.HasSuffix(c.Resource, "/"+framework.Booted.Cluster.APIServerName()):
				repairsRead++
			}
		}
		if read < 2 {
			return fmt.Errorf("%d of 2 clusterforge-ops replicas read their scale set; calls: %+v", read, calls)
		}
		if repairsRead < 2 {
			return fmt.Errorf("%d of 2 clusterforge-ops replicas read whether the apiserver scale set's repairs run; calls: %+v", repairsRead, calls)
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
}
