// Package e2etimes reads where the end-to-end tier's time went from its `go test -v` log
// (build/e2e.log): each package's time and each of its top-level tests', for build/e2e-times.json
// and the table docs/testing.md shows (`rehearse e2e-times`).
package e2etimes

import (
	"bufio"
	"fmt"
	"io"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"time"
)

// Run is one `make e2e`.
type Run struct {
	// Finished is when the log was last written.
	Finished time.Time `json:"finished"`
	Machine  string    `json:"machine"`
	Packages []Package `json:"packages"`
}

// Package is one package's tests, in the order they ran.
type Package struct {
	Name    string  `json:"package"`
	Result  string  `json:"result"` // ok or FAIL
	Seconds float64 `json:"seconds"`
	Tests   []Test  `json:"tests"`
}

// Test is one top-level test.
type Test struct {
	Name    string  `json:"name"`
	Result  string  `json:"result"` // PASS, FAIL or SKIP
	Seconds float64 `json:"seconds"`
}

var (
	testLine    = regexp.MustCompile(`^--- (PASS|FAIL|SKIP): (\S+) \(([0-9.]+)s\)`)
	packageLine = regexp.MustCompile(`^(ok|FAIL)\s+(\S+)\s+([0-9.]+)s`)
)

// Parse reads a `go test -v` log of packages run one at a time: a top-level test's result line
// (not indented, unlike a subtest's) belongs to the package whose summary line comes next.
// Packages that ran no test are left out.
func Parse(r io.Reader) ([]Package, error) {
	var packages []Package
	var tests []Test
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 1<<20), 16<<20)
	for sc.Scan() {
		line := sc.Text()
		if m := testLine.FindStringSubmatch(line); m != nil {
			s, _ := strconv.ParseFloat(m[3], 64)
			tests = append(tests, Test{Name: m[2], Result: m[1], Seconds: s})
			continue
		}
		if m := packageLine.FindStringSubmatch(line); m != nil {
			s, _ := strconv.ParseFloat(m[3], 64)
			if len(tests) > 0 {
				packages = append(packages, Package{Name: m[2], Result: m[1], Seconds: s, Tests: tests})
			}
			tests = nil
		}
	}
	return packages, sc.Err()
}

// Table is the run as markdown: each package's time and its slowest tests, then the total.
func Table(run Run, module string) string {
	var b strings.Builder
	fmt.Fprintf(&b, "`make e2e` finished %s on %s.\n\n", run.Finished.UTC().Format("2006-01-02 15:04 MST"), run.Machine)
	b.WriteString("| package | time | result | its slowest tests |\n|---|---|---|---|\n")
	var total float64
	for _, p := range run.Packages {
		total += p.Seconds
		slowest := append([]Test(nil), p.Tests...)
		sort.SliceStable(slowest, func(i, j int) bool { return slowest[i].Seconds > slowest[j].Seconds })
		var names []string
		for _, t := range slowest[:min(len(slowest), 4)] {
			names = append(names, fmt.Sprintf("%s %s", t.Name, duration(t.Seconds)))
		}
		count := fmt.Sprintf("%d tests", len(p.Tests))
		if len(p.Tests) == 1 {
			count = "1 test"
		}
		fmt.Fprintf(&b, "| `%s` | %s | %s, %s | %s |\n", strings.TrimPrefix(strings.TrimPrefix(p.Name, module), "/"),
			duration(p.Seconds), p.Result, count, strings.Join(names, ", "))
	}
	// The first packages (the fast tier's leftovers) run side by side: the sum is an upper bound.
	fmt.Fprintf(&b, "| sum | %s | | |\n", duration(total))
	return b.String()
}

// duration is seconds as "12 s" or "3 min 4 s".
func duration(s float64) string {
	n := int(s + 0.5)
	if n < 60 {
		return fmt.Sprintf("%d s", n)
	}
	return fmt.Sprintf("%d min %d s", n/60, n%60)
}
