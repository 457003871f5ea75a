// Package docblock keeps a page's generated block, between `<!-- name:start -->` and
// `<!-- name:end -->`, equal to what the code says: a test compares them, and rewrites the block
// when run with -update.
package docblock

import (
	"fmt"
	"os"
	"strings"
	"testing"
)

// Read is the block name of page and what comes before and after it.
func Read(page, name string) (before, block, after string, err error) {
	data, err := os.ReadFile(page)
	if err != nil {
		return "", "", "", err
	}
	start, end := "<!-- "+name+":start -->", "<!-- "+name+":end -->"
	before, rest, ok := strings.Cut(string(data), start)
	block, after, ok2 := strings.Cut(rest, end)
	if !ok || !ok2 {
		return "", "", "", fmt.Errorf("%s has no %s ... %s block", page, start, end)
	}
	return before + start, block, end + after, nil
}

// Check fails t unless page's block name is want (after the start marker's newline); with
// update it writes want there instead. rerun is the command that does so.
func Check(t *testing.T, page, name, want string, update bool, rerun string) {
	t.Helper()
	before, block, after, err := Read(page, name)
	if err != nil {
		t.Fatal(err)
	}
	if update {
		if err := os.WriteFile(page, []byte(before+"\n"+want+after), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	if block != "\n"+want {
		t.Errorf("%s's %s block is not what the code says: run `%s` and review the diff", page, name, rerun)
	}
}
