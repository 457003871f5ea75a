package machines

import (
	"flag"
	"testing"

	"github.com/clusterforge/clusterforge/test/docblock"
)

var updateDocs = flag.Bool("update", false, "rewrite the generated block of docs/reference/rehearsal-deviations.md")

// The deviations page shows exactly Deviations: its block between the markers is
// markdownDeviations (`go test ./test/machines -run DeviationsPage -update` rewrites it).
func TestDeviationsPageShowsTheCode(t *testing.T) {
	docblock.Check(t, "../../docs/reference/rehearsal-deviations.md", "deviations", markdownDeviations(), *updateDocs,
		"go test ./test/machines -run DeviationsPage -update")
}
