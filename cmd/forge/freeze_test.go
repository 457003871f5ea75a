package main

import (
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/clusterforge/clusterforge/components/spec"
)

// Freezing the dev stack as it was before its first apply (its frozen lines removed) writes back
// the frozen lines and values that are checked in, beside the other (frozen) stacks; a second
// freeze changes nothing.
func TestFreezeReproducesTheCheckedInStack(t *testing.T) {
	dir := t.TempDir()
	files, _ := filepath.Glob(filepath.Join("..", "..", spec.StackDir, "Pulumi.*.yaml"))
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		if filepath.Base(f) == "Pulumi.dev.yaml" {
			var kept []string
			for _, line := range strings.SplitAfter(string(data), "\n") {
				if !strings.Contains(line, "# frozen by make freeze") {
					kept = append(kept, line)
				}
			}
			data = []byte(strings.Join(kept, ""))
		}
		if err := os.WriteFile(filepath.Join(dir, filepath.Base(f)), data, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if err := freeze(dir, "dev", io.Discard); err != nil {
		t.Fatal(err)
	}
	got, _ := os.ReadFile(spec.StackFile(dir, "dev"))
	want, _ := os.ReadFile(filepath.Join("..", "..", spec.StackDir, "Pulumi.dev.yaml"))
	if a, b := frozenLines(got), frozenLines(want); strings.Join(a, "\n") != strings.Join(b, "\n") {
		t.Errorf("froze\n%s\nwant the checked-in\n%s", strings.Join(a, "\n"), strings.Join(b, "\n"))
	}
	gotSpec, err := spec.ParseStackFile(got)
	if err != nil {
		t.Fatal(err)
	}
	wantSpec, err := spec.ParseStackFile(want)
	if err != nil {
		t.Fatal(err)
	}
	if a, b := resolved(t, gotSpec), resolved(t, wantSpec); a != b {
		t.Errorf("the frozen stack resolves to\n%s\nthe checked-in one to\n%s", a, b)
	}
	if err := freeze(dir, "dev", io.Discard); err != nil {
		t.Fatal(err)
	}
	again, _ := os.ReadFile(spec.StackFile(dir, "dev"))
	if string(again) != string(got) {
		t.Error("a second freeze changed the file")
	}
}

// frozenLines are the lines freeze wrote, sorted.
func frozenLines(data []byte) []string {
	var out []string
	for _, line := range strings.Split(string(data), "\n") {
		if strings.Contains(line, "# frozen by make freeze") {
			out = append(out, strings.TrimSpace(line))
		}
	}
	slices.Sort(out)
	return out
}

func resolved(t *testing.T, c *spec.Cluster) string {
	t.Helper()
	data, err := c.Resolved()
	if err != nil {
		t.Fatal(err)
	}
	return string(data)
}
