package booted_test

import (
	"os"
	"testing"

	"github.com/clusterforge/clusterforge/components/spec"
	"github.com/clusterforge/clusterforge/test/drills"
	"github.com/clusterforge/clusterforge/test/e2e/boot"
	"github.com/clusterforge/clusterforge/test/e2e/controlplane"
	"github.com/clusterforge/clusterforge/test/e2e/dataplane"
	"github.com/clusterforge/clusterforge/test/e2e/framework"
	"github.com/clusterforge/clusterforge/test/e2e/join"
	"github.com/clusterforge/clusterforge/test/e2e/ops"
	"github.com/clusterforge/clusterforge/test/e2e/rolls"
	"github.com/clusterforge/clusterforge/test/e2e/services"
	"github.com/clusterforge/clusterforge/test/e2e/tenants"
	"github.com/clusterforge/clusterforge/test/netns"
)

func TestMain(m *testing.M) {
	os.Exit(framework.BootMain(m))
}

// The scenarios on the booted machines, in the order they have always run: those that stop,
// reboot, wipe or replace machines leave the cluster serving for the next.

func TestNoPerNodeAgentReadsTheWholeCluster(t *testing.T) {
	controlplane.NoPerNodeAgentReadsTheWholeCluster(t)
}

func TestJoinNeedsTheInstancesAttestedDocument(t *testing.T) {
	join.JoinNeedsTheInstancesAttestedDocument(t)
}

func TestNodeRenewsAsItsInstance(t *testing.T) {
	join.NodeRenewsAsItsInstance(t)
}

func TestOpsSignsInToAzure(t *testing.T) {
	ops.OpsSignsInToAzure(t)
}

func TestEveryMachineBootedCleanly(t *testing.T) {
	boot.EveryMachineBootedCleanly(t)
}

func TestHostReachesTheAPIThroughLoopback(t *testing.T) {
	boot.HostReachesTheAPIThroughLoopback(t)
}

func TestClusterForms(t *testing.T) {
	boot.ClusterForms(t)
}

func TestEventsOnlyInEventsEtcd(t *testing.T) {
	framework.NeedBoot(t)
	controlplane.EventsOnlyInEventsEtcd(t, framework.Booted)
}

func TestSecretsEncryptedAtRest(t *testing.T) {
	framework.NeedBoot(t)
	controlplane.SecretsEncryptedAtRest(t, framework.Booted)
}

func TestTLSEverywhere(t *testing.T) {
	framework.NeedBoot(t)
	// etcd takes a peer only from an address its certificate names: from another etcd-main member
	// (the scenario's peer checks go to the first member of each cluster).
	ns, err := framework.Booted.MachineNetns(framework.Booted.Of(spec.RoleEtcdMain)[1].Name)
	if err != nil {
		t.Fatal(err)
	}
	controlplane.TLSEverywhere(t, framework.Booted.Layout, netns.DialerIn(ns))
}

func TestPreloadedPodRunsWithNothingPulled(t *testing.T) {
	boot.PreloadedPodRunsWithNothingPulled(t)
}

func TestMissingDiskKeepsEtcdOffTheOSDisk(t *testing.T) {
	boot.MissingDiskKeepsEtcdOffTheOSDisk(t)
}

func TestCleanRebootKeepsTheMember(t *testing.T) {
	boot.CleanRebootKeepsTheMember(t)
}

func TestWipedMemberRejoins(t *testing.T) {
	framework.NeedBoot(t)
	drills.WipedMemberRejoins(t, framework.Booted)
}

func TestAPIServerLoss(t *testing.T) {
	framework.NeedBoot(t)
	drills.APIServerLoss(t, framework.Booted)
}

func TestEventsEtcdLoss(t *testing.T) {
	framework.NeedBoot(t)
	drills.EventsEtcdLoss(t, framework.Booted)
}

func TestPodsReachAcrossWorkerVNetsThroughTheirPeering(t *testing.T) {
	dataplane.PodsReachAcrossWorkerVNetsThroughTheirPeering(t)
}

func TestProviderIDsAreScaleSetInstancesOfTheirPool(t *testing.T) {
	dataplane.ProviderIDsAreScaleSetInstancesOfTheirPool(t)
}

func TestScaleSetGrowthBootsAWorkerThatJoins(t *testing.T) {
	dataplane.ScaleSetGrowthBootsAWorkerThatJoins(t)
}

func TestPodReachesPodsAndServices(t *testing.T) {
	dataplane.PodReachesPodsAndServices(t)
}

func TestPodDNSThroughCoreDNS(t *testing.T) {
	dataplane.PodDNSThroughCoreDNS(t)
}

func TestPodCallsTheAPIWithItsToken(t *testing.T) {
	dataplane.PodCallsTheAPIWithItsToken(t)
}

func TestPodsCannotReachTheMetadataEndpoints(t *testing.T) {
	dataplane.PodsCannotReachTheMetadataEndpoints(t)
}

func TestPrometheusScrapesTheControlPlaneAndNodes(t *testing.T) {
	dataplane.PrometheusScrapesTheControlPlaneAndNodes(t)
}

func TestPodTrafficIsCountedByNamespace(t *testing.T) {
	dataplane.PodTrafficIsCountedByNamespace(t)
}

func TestRuncEscapeShapesAreContained(t *testing.T) {
	tenants.RuncEscapeShapesAreContained(t)
}

func TestHostileTenantIsRefused(t *testing.T) {
	tenants.HostileTenantIsRefused(t)
}

func TestTeamsAreApartOnTheNetwork(t *testing.T) {
	tenants.TeamsAreApartOnTheNetwork(t)
}

func TestCompromisedNodeStaysItself(t *testing.T) {
	tenants.CompromisedNodeStaysItself(t)
}

func TestWorkerImageServesPreloadedImagesFromTheLocalDisk(t *testing.T) {
	boot.WorkerImageServesPreloadedImagesFromTheLocalDisk(t)
}

func TestWorkerImageSysctls(t *testing.T) {
	boot.WorkerImageSysctls(t)
}

func TestJoinTokenLeavesTheWorkers(t *testing.T) {
	join.JoinTokenLeavesTheWorkers(t)
}

func TestPrometheusFiresEtcdNoSpaceDuringTheDrill(t *testing.T) {
	controlplane.PrometheusFiresEtcdNoSpaceDuringTheDrill(t)
}

func TestOperationsLayerRunsOnTheWorkers(t *testing.T) {
	ops.OperationsLayerRunsOnTheWorkers(t)
}

func TestNodeProblemDetectorReportsItsOwnNode(t *testing.T) {
	ops.NodeProblemDetectorReportsItsOwnNode(t)
}

func TestNodeAgentsChangeOnlyTheirOwnNode(t *testing.T) {
	ops.NodeAgentsChangeOnlyTheirOwnNode(t)
}

func TestFailedAPIServerIsRepairedByItsScaleSet(t *testing.T) {
	controlplane.FailedAPIServerIsRepairedByItsScaleSet(t)
}

func TestMainEtcdOutageRepairsNoAPIServer(t *testing.T) {
	controlplane.MainEtcdOutageRepairsNoAPIServer(t)
}

func TestKubeletUpgradeRoll(t *testing.T) {
	rolls.KubeletUpgradeRoll(t)
}

func TestServicesStackUnderTheEngine(t *testing.T) {
	services.ServicesStackUnderTheEngine(t)
}

func TestSimulatedNodesHaveARealKubeletsStatus(t *testing.T) {
	dataplane.SimulatedNodesHaveARealKubeletsStatus(t)
}
