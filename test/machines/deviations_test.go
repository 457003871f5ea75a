package machines

import (
	"flag"
	"os"
	"strings"
	"testing"
)

var updateDocs = flag.Bool("update", false, "rewrite the generated block of docs/reference/rehearsal-deviations.md")

// The deviations page shows exactly Deviations: its block between the markers is
// markdownDeviations (`go test ./test/machines -run DeviationsPage -update` rewrites it).
func TestDeviationsPageShowsTheCode(t *testing.T) {
	const page = "../../docs/reference/rehearsal-deviations.md"
	data, err := os.ReadFile(page)
	if err != nil {
		t.Fatal(err)
	}
	before, rest, ok := strings.Cut(string(data), "<!-- deviations:start -->\n")
	block, after, ok2 := strings.Cut(rest, "<!-- deviations:end -->")
	if !ok || !ok2 {
		t.Fatalf("%s has no <!-- deviations:start/end --> block", page)
	}
	want := markdownDeviations()
	if *updateDocs {
		if err := os.WriteFile(page, []byte(before+"<!-- deviations:start -->\n"+want+"<!-- deviations:end -->"+after), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	if block != want {
		t.Errorf("%s's table is not Deviations: run `go test ./test/machines -run DeviationsPage -update` and review the diff", page)
	}
}
