package rehearsal_test

import (
	"os"
	"testing"

	"github.com/clusterforge/clusterforge/test/e2e/controlplane"
	"github.com/clusterforge/clusterforge/test/e2e/framework"
	"github.com/clusterforge/clusterforge/test/e2e/ops"
)

func TestMain(m *testing.M) {
	os.Exit(framework.Main(m, framework.Options{Name: "shared", Base: framework.BaseShared, Shared: true}))
}

// The control plane's scenarios first: their drills stop, wipe and restore machines and leave the
// cluster serving, which the operations layer's scenarios after them then rely on.
func TestAddons(t *testing.T) {
	controlplane.Addons(t)
}

func TestAPIThroughLoadBalancerListsPools(t *testing.T) {
	controlplane.APIThroughLoadBalancerListsPools(t)
}

func TestEventsOnlyInEventsEtcd(t *testing.T) {
	framework.NeedRehearsal(t)
	controlplane.EventsOnlyInEventsEtcd(t, framework.Running)
}

func TestSecretsEncryptedAtRest(t *testing.T) {
	framework.NeedRehearsal(t)
	controlplane.SecretsEncryptedAtRest(t, framework.Running)
}

func TestTLSEverywhere(t *testing.T) {
	framework.NeedRehearsal(t)
	controlplane.TLSEverywhere(t, framework.Running.Layout.Layout, nil)
}

func TestEtcdQuotaAndNospaceRecovery(t *testing.T) {
	controlplane.EtcdQuotaAndNospaceRecovery(t)
}

func TestEtcdQuorumLossAndRestore(t *testing.T) {
	controlplane.EtcdQuorumLossAndRestore(t)
}

func TestWipedMemberRejoins(t *testing.T) {
	controlplane.WipedMemberRejoins(t)
}

func TestAPIServerFailover(t *testing.T) {
	controlplane.APIServerFailover(t)
}

func TestEventsEtcdOutage(t *testing.T) {
	controlplane.EventsEtcdOutage(t)
}

func TestSchedulerBinPacks(t *testing.T) {
	controlplane.SchedulerBinPacks(t)
}

func TestCISBenchmark(t *testing.T) {
	controlplane.CISBenchmark(t)
}

func TestAuditLogHoldsNoCredentials(t *testing.T) {
	controlplane.AuditLogHoldsNoCredentials(t)
}

func TestKubeletServingCertificatesNeedTheNodesIdentity(t *testing.T) {
	controlplane.KubeletServingCertificatesNeedTheNodesIdentity(t)
}

func TestCSRApproverStandsAgainAfterItsAPIServersOutage(t *testing.T) {
	controlplane.CSRApproverStandsAgainAfterItsAPIServersOutage(t)
}

func TestPublishedIssuerIsTheAPIServers(t *testing.T) {
	controlplane.PublishedIssuerIsTheAPIServers(t)
}

func TestMutationLeaseIsOneAtATime(t *testing.T) {
	controlplane.MutationLeaseIsOneAtATime(t)
}

// The operations layer's scenarios, on the rehearsal the drills above left serving.
func TestBrakeLedgerIsACompareAndSwapOnTheAPIServer(t *testing.T) {
	ops.BrakeLedgerIsACompareAndSwapOnTheAPIServer(t)
}

func TestRemediationCannotEmptyAPoolPastTheBrake(t *testing.T) {
	ops.RemediationCannotEmptyAPoolPastTheBrake(t)
}

func TestScheduledRebootDrainsTheNodeAhead(t *testing.T) {
	ops.ScheduledRebootDrainsTheNodeAhead(t)
}

func TestPreflightTaintLifeCycle(t *testing.T) {
	ops.PreflightTaintLifeCycle(t)
}

func TestTeamNamespacesGetTheQuota(t *testing.T) {
	ops.TeamNamespacesGetTheQuota(t)
}

func TestTeamObjectsAreCapped(t *testing.T) {
	ops.TeamObjectsAreCapped(t)
}

func TestTeamBorrowsIdleNodesAndGivesThemBackByPreemption(t *testing.T) {
	ops.TeamBorrowsIdleNodesAndGivesThemBackByPreemption(t)
}
