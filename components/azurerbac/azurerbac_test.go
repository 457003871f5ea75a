package azurerbac

import (
	"flag"
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/clusterforge/clusterforge/components/addons"
	"github.com/clusterforge/clusterforge/components/spec"
	"github.com/clusterforge/clusterforge/components/wellknown"
	"github.com/clusterforge/clusterforge/test/docblock"
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
			{Role: RoleMachineLister, Scope: ScopeResourceGroup, Consumer: "cluster-autoscaler"},
			{Role: RoleScaleSetScaler, Scope: ScopeWorkerScaleSets, Consumer: "cluster-autoscaler"},
		},
		wellknown.OpsName: {
			{Role: RoleScaleSetInstanceRemover, Scope: ScopeWorkerScaleSets, Consumer: "clusterforge-ops"},
			{Role: RoleOperationReader, Scope: ScopeResourceGroup, Consumer: "clusterforge-ops"},
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
	for _, role := range []string{RoleScaleSetLister, RoleMachineLister, RoleOperationReader, RoleScaleSetInstanceReader} {
		for _, a := range CustomRoleActions[role] {
			if !strings.HasSuffix(a, "/read") {
				t.Errorf("%s may %s, want reads only", role, a)
			}
		}
	}
}

var update = flag.Bool("update", false, "rewrite the generated blocks of the docs")

// The Azure roles page lists every grant, its actions and why (`go test ./components/azurerbac
// -run RolesPage -update` rewrites it).
func TestRolesPageListsEveryGrant(t *testing.T) {
	var b strings.Builder
	b.WriteString("| identity | role | actions | scope | why |\n|---|---|---|---|---|\n")
	for _, principal := range append([]string{spec.RoleEtcdMain, spec.RoleAPIServer}, addons.AzureWorkloads...) {
		for _, g := range Grants(principal) {
			role, actions := g.Role, append(slices.Clone(CustomRoleActions[g.Role]), CustomRoleDataActions[g.Role]...)
			if !IsCustom(g.Role) {
				role = builtInNames[g.Role] + " (built-in)"
				actions = []string{"as Azure defines it"}
			}
			fmt.Fprintf(&b, "| %s | %s | %s | %s | %s |\n", principal, role, "`"+strings.Join(actions, "`, `")+"`", g.Scope, g.Consumer)
		}
	}
	docblock.Check(t, "../../docs/reference/azure-roles.md", "grants", b.String(), *update, "go test ./components/azurerbac -run RolesPage -update")
}

var builtInNames = map[string]string{RoleStorageBlobDataContributor: "Storage Blob Data Contributor", RoleStorageBlobDataReader: "Storage Blob Data Reader"}
