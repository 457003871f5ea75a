package machines

import (
	"flag"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/clusterforge/clusterforge/test/docblock"
)

var updateDocs = flag.Bool("update", false, "rewrite the generated blocks of docs/reference/rehearsal-deviations.md and README.md")

// The deviations page shows exactly Deviations: its block between the markers is
// markdownDeviations (`go test ./test/machines -run DeviationsPage -update` rewrites it).
func TestDeviationsPageShowsTheCode(t *testing.T) {
	docblock.Check(t, "../../docs/reference/rehearsal-deviations.md", "deviations", markdownDeviations(), *updateDocs,
		"go test ./test/machines -run DeviationsPage -update")
}

// A comment that cites a deviation ("deviation \"kernel\"") names one the list has: a reader who
// follows it finds the row.
func TestCitedDeviationsAreListed(t *testing.T) {
	listed := map[string]bool{}
	for _, d := range Deviations {
		listed[d.Topic] = true
	}
	cited := regexp.MustCompile(`deviations? \\?"([^"\\]+)\\?"`)
	err := filepath.WalkDir("../..", func(path string, e fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if e.IsDir() && (e.Name() == ".tools" || e.Name() == "build" || e.Name() == ".git") {
			return filepath.SkipDir
		}
		if e.IsDir() || !strings.HasSuffix(path, ".go") {
			return nil
		}
		data, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		for _, m := range cited.FindAllStringSubmatch(string(data), -1) {
			// A citation may wrap onto the next comment line.
			topic := strings.Join(strings.Fields(strings.ReplaceAll(m[1], "//", "")), " ")
			if !listed[topic] {
				t.Errorf("%s cites deviation %q, which machines.Deviations does not list", path, topic)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

// The README's status is Status (`go test ./test/machines -run StatusTable -update`), and every
// deviation belongs to one of its parts at least: a run the status claims carries the list's
// qualifications.
func TestStatusTableCoversEveryDeviation(t *testing.T) {
	docblock.Check(t, "../../README.md", "status", markdownStatus("docs/reference/rehearsal-deviations.md"), *updateDocs,
		"go test ./test/machines -run StatusTable -update")
	part := map[string]string{}
	for _, p := range Status {
		for i, topic := range p.Deviations {
			if slices.Contains(p.Deviations[:i], topic) {
				t.Errorf("status part %q names deviation %q twice", p.Name, topic)
			}
			part[topic] = p.Name
		}
	}
	listed := map[string]bool{}
	for _, d := range Deviations {
		listed[d.Topic] = true
		if _, ok := part[d.Topic]; !ok {
			t.Errorf("deviation %q belongs to no part of the status", d.Topic)
		}
	}
	for topic, name := range part {
		if !listed[topic] {
			t.Errorf("status part %q names deviation %q, which the list does not have", name, topic)
		}
	}
}
