package spec

import (
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/clusterforge/clusterforge/test/docblock"
)

// The tenant page's table of the team quota is DefaultTeamQuota and QuotaUncounted (`go test
// ./components/spec -run TeamQuotaPage -update` rewrites it).
func TestTeamQuotaPageShowsTheDefaults(t *testing.T) {
	var b strings.Builder
	b.WriteString("| resource | default |\n|---|---|\n")
	names := make([]string, 0, len(DefaultTeamQuota))
	for name := range DefaultTeamQuota {
		names = append(names, name)
	}
	slices.Sort(names)
	for _, name := range names {
		fmt.Fprintf(&b, "| `%s` | %s |\n", name, DefaultTeamQuota[name])
	}
	for _, name := range QuotaUncounted {
		fmt.Fprintf(&b, "| `%s` | not counted |\n", name)
	}
	docblock.Check(t, "../../docs/operations/tenants.md", "team-quota", b.String(), *update, "go test ./components/spec -run TeamQuotaPage -update")

	defaults := Teams{Quota: DefaultTeamQuota, MaxObjectBytes: DefaultTeamMaxObjectBytes, MaxDataObjectBytes: DefaultTeamMaxDataObjectBytes}
	sizes := fmt.Sprintf("| objects | largest, as JSON | stack setting |\n|---|---|---|\n| %s | %d KiB | `teams.maxDataObjectBytes` |\n| every other kind | %d KiB | `teams.maxObjectBytes` |\n\n"+
		"At the defaults the objects of a team namespace take at most %s of etcd-main (each kind the quota counts, times its largest object; what this leaves out is at the end of this page); "+
		"validation refuses a stack where that passes 1/%d of `etcdMain.quotaBackendBytes`.\n",
		strings.Join(TeamDataResources, ", "), DefaultTeamMaxDataObjectBytes>>10, DefaultTeamMaxObjectBytes>>10, GiB(defaults.Footprint()), MaxFootprintShare)
	docblock.Check(t, "../../docs/operations/tenants.md", "team-objects", sizes, *update, "go test ./components/spec -run TeamQuotaPage -update")
}
