package controlplane

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore/to"
	"github.com/Azure/azure-sdk-for-go/sdk/resourcemanager/compute/armcompute/v6"

	"github.com/clusterforge/clusterforge/components/machine"
	"github.com/clusterforge/clusterforge/components/ops/scaleset"
	"github.com/clusterforge/clusterforge/components/spec"
	"github.com/clusterforge/clusterforge/components/wellknown"
	"github.com/clusterforge/clusterforge/test/drills"
	"github.com/clusterforge/clusterforge/test/e2e/framework"
	"github.com/clusterforge/clusterforge/test/machines"
	"github.com/clusterforge/clusterforge/test/machines/nspawn"
	"github.com/clusterforge/clusterforge/test/standin/arm"
)

// L05: an apiserver machine whose apiserver fails for good fails the load balancer's probe, and
// the scale set's automatic instance repairs reimage it without an operator: Resource Manager's
// stand-in judges by the load balancer stand-in's probe (time ten times faster: a minute's grace)
// and reimages through the process that booted the machines. The new OS disk brings the apiserver
// back. No other machine restarts, etcd's least of all. The operator resumes the repairs with the
// Azure SDK, as the runbook does, and suspends them again.
func FailedAPIServerIsRepairedByItsScaleSet(t *testing.T) {
	framework.NeedBoot(t)
	ctx := context.Background()
	c := framework.Booted.Cluster
	apiservers := framework.Booted.Of(spec.RoleAPIServer)
	victim := apiservers[len(apiservers)-1]
	in, err := scaleset.ParseProviderID(scaleset.ProviderIDPrefix + machines.ResourceID(c, spec.RoleAPIServer, victim.Name))
	if err != nil {
		t.Fatal(err)
	}
	resumeRepairs(t, in.ScaleSet)
	pids := machinePIDs()

	const marker = "/var/lib/clusterforge-before-repair"
	if _, err := framework.Booted.Exec(ctx, victim.Name, "touch", marker); err != nil {
		t.Fatal(err)
	}
	began := time.Now()
	// Broken on its OS disk: no restart brings it back, only a new disk. The unit is Type=simple, so
	// `systemctl restart` returns before /bin/false exits: wait up to 5 s for it to leave active.
	broken := fmt.Sprintf("mkdir -p %[1]s/%[2]s.d && printf '[Service]\nExecStart=\nExecStart=/bin/false\n' > %[1]s/%[2]s.d/99-broken.conf && systemctl daemon-reload && systemctl restart %[2]s; for i in $(seq 50); do systemctl is-active -q %[2]s || exit 1; sleep 0.1; done; systemctl is-active %[2]s",
		machine.UnitDir, machine.APIServerUnit)
	// A failure before the repair must not leave the apiserver broken for the scenarios after this.
	t.Cleanup(func() {
		mend := fmt.Sprintf("if [ -e %[1]s/%[2]s.d/99-broken.conf ]; then rm %[1]s/%[2]s.d/99-broken.conf && systemctl daemon-reload && systemctl restart %[2]s; fi",
			machine.UnitDir, machine.APIServerUnit)
		if out, err := framework.Booted.Exec(context.Background(), victim.Name, "sh", "-c", mend); err != nil {
			t.Errorf("mend %s: %v: %s", victim.Name, err, out)
		}
	})
	if out, err := framework.Booted.Exec(ctx, victim.Name, "sh", "-c", broken); err == nil {
		t.Fatalf("%s still active after it was broken: %s", machine.APIServerUnit, out)
	}
	backend := fmt.Sprintf("%s:%d", victim.IP, wellknown.APIServerPort)
	if err := drills.WaitUntil(time.Minute, func() error { return drills.LBHealthy(framework.Booted, backend, false) }); err != nil {
		t.Fatalf("the load balancer kept %s in rotation: %v", backend, err)
	}
	var repairCalls []arm.Call
	if err := drills.WaitUntil(3*time.Minute, func() error {
		calls, err := framework.Booted.ARMCalls()
		repairCalls = nil
		for _, call := range calls {
			if call.Client == arm.RepairsClient {
				repairCalls = append(repairCalls, call)
			}
		}
		if err == nil && len(repairCalls) == 0 {
			err = fmt.Errorf("no repair yet")
		}
		return err
	}); err != nil {
		t.Fatal(err)
	}
	t.Logf("repair started %.0fs after the apiserver was broken", time.Since(began).Seconds())
	if err := drills.WaitUntil(5*time.Minute, func() error {
		if err := drills.LBHealthy(framework.Booted, backend, true); err != nil {
			return err
		}
		if out, err := framework.Booted.Exec(ctx, victim.Name, "sh", "-c", "test ! -e "+marker+" && echo new"); err != nil || strings.TrimSpace(out) != "new" {
			return fmt.Errorf("%s still has the old OS disk (%v)", victim.Name, err)
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	t.Logf("back in rotation on a new OS disk %.0fs after the apiserver was broken", time.Since(began).Seconds())

	calls, err := framework.Booted.ARMCalls()
	if err != nil {
		t.Fatal(err)
	}
	want := "/virtualMachineScaleSets/" + in.ScaleSet + "/virtualMachines/" + in.ID
	for _, call := range calls {
		if call.Client != arm.RepairsClient {
			continue
		}
		if !strings.HasSuffix(call.Resource, want) {
			t.Errorf("a repair of %s: only %s failed", call.Resource, want)
		}
	}
	for _, m := range framework.Booted.Machines {
		if m.Name != victim.Name && m.PID != pids[m.Name] {
			t.Errorf("%s (%s) restarted during the repair", m.Name, m.Role)
		}
	}
	if m, _ := framework.Booted.Machine(victim.Name); m.PID == pids[victim.Name] {
		t.Errorf("%s kept its machine through the repair", victim.Name)
	}
	if err := framework.Booted.WaitAPIHealthy(ctx); err != nil {
		t.Fatal(err)
	}
}

// An outage of the main etcd fails every apiserver's readiness, so the load balancer takes them
// all out, but not their liveness, which the repairs judge by: with the repairs running, no
// apiserver is reimaged (its audit log and OS disk stay) however long the outage lasts past the
// repairs' grace, and the cluster serves again once etcd is back.
func MainEtcdOutageRepairsNoAPIServer(t *testing.T) {
	framework.NeedBoot(t)
	ctx := context.Background()
	c := framework.Booted.Cluster
	apiservers := framework.Booted.Of(spec.RoleAPIServer)
	in, err := scaleset.ParseProviderID(scaleset.ProviderIDPrefix + machines.ResourceID(c, spec.RoleAPIServer, apiservers[0].Name))
	if err != nil {
		t.Fatal(err)
	}
	resumeRepairs(t, in.ScaleSet)
	pids := machinePIDs()
	const marker = "/var/lib/clusterforge-before-outage"
	for _, m := range apiservers {
		if _, err := framework.Booted.Exec(ctx, m.Name, "touch", marker); err != nil {
			t.Fatal(err)
		}
	}
	calls, err := framework.Booted.ARMCalls()
	if err != nil {
		t.Fatal(err)
	}
	repairsBefore := repairCount(calls)

	members := framework.Booted.Of(spec.RoleEtcdMain)
	// Every member at once, as an outage takes them.
	etcd := func(verb string) error {
		errs := make([]error, len(members))
		var wg sync.WaitGroup
		for i, m := range members {
			wg.Go(func() {
				if out, err := framework.Booted.Exec(ctx, m.Name, "systemctl", verb, machine.EtcdUnit); err != nil {
					errs[i] = fmt.Errorf("%s etcd on %s: %v: %s", verb, m.Name, err, out)
				}
			})
		}
		wg.Wait()
		return errors.Join(errs...)
	}
	startEtcd := func() {
		if err := etcd("start"); err != nil {
			t.Error(err)
		}
	}
	defer startEtcd()
	stopping := time.Now()
	if err := etcd("stop"); err != nil {
		t.Fatal(err)
	}
	t.Logf("the main etcd's %d members stopped in %.0f s", len(members), time.Since(stopping).Seconds())
	began := time.Now()
	for _, m := range apiservers {
		backend := fmt.Sprintf("%s:%d", m.IP, wellknown.APIServerPort)
		if err := drills.WaitUntil(time.Minute, func() error { return drills.LBHealthy(framework.Booted, backend, false) }); err != nil {
			t.Fatalf("the main etcd is down and the load balancer kept %s in rotation: %v", backend, err)
		}
	}
	outOfRotation := time.Since(began)
	// Past the grace period, on the stand-in's faster clock, by four rounds of the repairs: a repair
	// due at the grace period would have started in the first. The grace runs from an instance's
	// last change, long before; counted from the outage instead, the drill would hold as well.
	grace, err := (&arm.Repairs{GracePeriod: spec.APIServerRepairGracePeriod}).Grace()
	if err != nil {
		t.Fatal(err)
	}
	time.Sleep(grace/nspawn.ARMSpeedup + 4*arm.RepairEvery/nspawn.ARMSpeedup)
	calls, err = framework.Booted.ARMCalls()
	if err != nil {
		t.Fatal(err)
	}
	if n := repairCount(calls); n != repairsBefore {
		t.Errorf("%d repairs during a main-etcd outage of %.0f s: the repairs reimaged apiservers for an outage that is not theirs", n-repairsBefore, time.Since(began).Seconds())
	}
	t.Logf("the main etcd down %.0f s, the apiservers out of the load balancer's rotation after %.0f s", time.Since(began).Seconds(), outOfRotation.Seconds())
	startEtcd()
	if err := framework.Booted.WaitAPIHealthy(ctx); err != nil {
		t.Fatal(err)
	}
	t.Logf("serving again %.0f s after the outage began", time.Since(began).Seconds())
	for _, m := range apiservers {
		if out, err := framework.Booted.Exec(ctx, m.Name, "test", "-e", marker); err != nil {
			t.Errorf("%s lost its OS disk during the outage: %v %s", m.Name, err, out)
		}
		if now, _ := framework.Booted.Machine(m.Name); now.PID != pids[m.Name] {
			t.Errorf("%s restarted during the outage", m.Name)
		}
	}
}

// resumeRepairs resumes the automatic repairs of scaleSet as the operator does with the Azure SDK
// (the boot leaves them suspended), and suspends them again when the test ends.
func resumeRepairs(t *testing.T, scaleSet string) {
	t.Helper()
	ctx := context.Background()
	factory, err := framework.Booted.ComputeAs(machines.RehearsalOperatorID)
	if err != nil {
		t.Fatal(err)
	}
	sets := factory.NewVirtualMachineScaleSetsClient()
	repairs := func(action armcompute.OrchestrationServiceStateAction) error {
		poller, err := sets.BeginSetOrchestrationServiceState(ctx, framework.Booted.Cluster.ResourceGroup(), scaleSet, armcompute.OrchestrationServiceStateInput{
			ServiceName: to.Ptr(armcompute.OrchestrationServiceNamesAutomaticRepairs), Action: to.Ptr(action)}, nil)
		if err == nil {
			_, err = poller.PollUntilDone(ctx, nil)
		}
		return err
	}
	if err := repairs(armcompute.OrchestrationServiceStateActionResume); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := repairs(armcompute.OrchestrationServiceStateActionSuspend); err != nil {
			t.Errorf("suspend the repairs again: %v", err)
		}
	})
}

// machinePIDs is each booted machine's PID 1 as this host sees it: a new one is a new boot.
func machinePIDs() map[string]int {
	pids := map[string]int{}
	for _, m := range framework.Booted.Machines {
		pids[m.Name] = m.PID
	}
	return pids
}

// repairCount is how many of calls are the automatic repairs' reimages.
func repairCount(calls []arm.Call) int {
	n := 0
	for _, call := range calls {
		if call.Client == arm.RepairsClient {
			n++
		}
	}
	return n
}
