package azurerbac

import (
	"strings"
	"testing"

	"github.com/clusterforge/clusterforge/components/addons"
	"github.com/clusterforge/clusterforge/components/spec"
	"github.com/clusterforge/clusterforge/components/wellknown"
)

// Only the components that call Azure hold grants, each the narrowest that serves it.
func TestGrantsAreLeastPrivilege(t *testing.T) {
	c := &spec.Cluster{Name: "cf-test", Network: spec.Network{Hub: spec.Hub{
		VNetID: "/subscriptions/00000000-0000-0000-0000-000000000001/resourceGroups/hub/providers/Microsoft.Network/virtualNetworks/hub", AddressSpace: "10.255.0.0/16"}},
		Pools: []spec.Pool{{Name: "cpu", VMSize: "Standard_D4ds_v5", Nodes: 3, System: true}, {Name: "gpu", VMSize: "Standard_NC4as_T4_v3"}}}
	c.Default()
	if err := c.Validate(); err != nil {
		t.Fatal(err)
	}
	want := map[string][]Grant{
		spec.RoleEtcdMain: {
			{Role: RoleStorageBlobDataContributor, Scope: ScopeBackupContainer, Consumer: "clusterforge-etcd-backup"},
			{Role: RoleBirthRecorder, Scope: ScopeBirths, Consumer: "clusterforge-etcd-backup"},
			{Role: RoleStorageBlobDataReader, Scope: ScopeRetirements, Consumer: "clusterforge-etcd-backup"},
		},
		spec.RoleAPIServer: {{Role: RoleScaleSetInstanceReader, Scope: ScopeWorkerScaleSets, Consumer: "clusterforge-csr-approver"}},
		addons.AutoscalerName: {
			{Role: RoleScaleSetLister, Scope: ScopeResourceGroup, Consumer: "cluster-autoscaler"},
			{Role: RoleVirtualMachineContributor, Scope: ScopeWorkerScaleSets, Consumer: "cluster-autoscaler"},
			{Role: RoleSubnetJoiner, Scope: ScopeNodeSubnet, Consumer: "cluster-autoscaler"},
			{Role: RoleManagedIdentityOperator, Scope: ScopeWorkerIdentities, Consumer: "cluster-autoscaler"},
		},
		wellknown.OpsName: {
			{Role: RoleScaleSetInstanceRemover, Scope: ScopeWorkerScaleSets, Consumer: "clusterforge-ops"},
			{Role: RoleScaleSetLister, Scope: ScopeAPIServerScaleSet, Consumer: "clusterforge-ops"},
		},
	}
	// Worker roles, the system pool's among them, hold nothing: a token from a worker's metadata
	// service opens nothing.
	for _, principal := range append(c.Roles(), addons.AzureWorkloads...) {
		got := Grants(principal)
		if len(got) != len(want[principal]) {
			t.Errorf("%s: %v, want %v", principal, got, want[principal])
			continue
		}
		for i, g := range got {
			w := want[principal][i]
			if g.Role != w.Role || g.Scope != w.Scope || !strings.HasPrefix(g.Consumer, w.Consumer) {
				t.Errorf("%s grant %d: %+v, want %+v", principal, i, g, w)
			}
		}
	}
	for _, role := range []string{RoleScaleSetLister, RoleScaleSetInstanceReader} {
		for _, a := range CustomRoleActions[role] {
			if !strings.HasSuffix(a, "/read") {
				t.Errorf("%s may %s, want reads only", role, a)
			}
		}
	}
}
