package offline

import (
	"fmt"
	"maps"
	"slices"
	"strings"
	"testing"

	"github.com/clusterforge/clusterforge/test/docblock"
)

// contributorModules are the azure-native modules whose resources Contributor lets the deploying
// identity write: every action of their providers. Microsoft.Authorization's are not among them.
var contributorModules = []string{"compute", "managedidentity", "network", "resources", "storage"}

// userAccessAdministrator holds Microsoft.Authorization/*: role definitions, assignments, locks.
const userAccessAdministrator = "User Access Administrator (or Owner) on the subscription"

// deployerRoles is what else the deploying identity needs for some kinds.
var deployerRoles = map[string]string{
	"azure-native:authorization:RoleDefinition":                     userAccessAdministrator,
	"azure-native:authorization:RoleAssignment":                     userAccessAdministrator,
	"azure-native:authorization:ManagementLockAtResourceGroupLevel": userAccessAdministrator,
	"azure-native:authorization:ManagementLockByScope":              userAccessAdministrator,
	"azure-native:network:VirtualNetworkPeering":                    "Contributor on the subscription; Network Contributor on the hub VNet for the hub's side",
}

// Every kind of Azure resource the program creates, on any checked-in stack, is on the
// prerequisites page with the role that lets the deploying identity create it
// (`go test ./infra/offline -run PrerequisitesPage -update` rewrites the list).
func TestPrerequisitesPageNamesEveryResourceKind(t *testing.T) {
	counts := map[string]map[string]int{}
	for _, stack := range stacks {
		for _, r := range planAll(t)[stack].Resources {
			if !strings.HasPrefix(r.Type, "azure-native:") {
				continue
			}
			if counts[r.Type] == nil {
				counts[r.Type] = map[string]int{}
			}
			counts[r.Type][stack]++
		}
	}
	var b strings.Builder
	b.WriteString("| resource | " + strings.Join(stacks, " | ") + " | the deploying identity needs |\n|---|" + strings.Repeat("---:|", len(stacks)) + "---|\n")
	for _, typ := range slices.Sorted(maps.Keys(counts)) {
		role, ok := deployerRoles[typ]
		if module := strings.Split(typ, ":")[1]; !ok && slices.Contains(contributorModules, module) {
			role, ok = "Contributor on the subscription", true
		}
		if !ok {
			t.Errorf("the program creates %s, and nothing says which role lets the deploying identity create it: add it to deployerRoles and the page", typ)
		}
		fmt.Fprintf(&b, "| `%s` |", strings.TrimPrefix(typ, "azure-native:"))
		for _, stack := range stacks {
			fmt.Fprintf(&b, " %d |", counts[typ][stack])
		}
		fmt.Fprintf(&b, " %s |\n", role)
	}
	docblock.Check(t, "../../docs/reference/azure-prerequisites.md", "resources", b.String(), *update,
		"go test ./infra/offline -run PrerequisitesPage -update")
}
