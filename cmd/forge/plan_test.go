package main

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"
)

// The test binary is the forge command when asked, so the hostile stacks run the real program
// without a second build.
func TestMain(m *testing.M) {
	if os.Getenv("CLUSTERFORGE_FORGE_MAIN") == "1" {
		main()
		os.Exit(0)
	}
	os.Exit(m.Run())
}

var want = regexp.MustCompile(`(?m)^# want: (.+)$`)

// Every hostile stack under testdata/hostile is refused: a non-zero exit, the field path (from the
// file's "# want:" line) in the error, no panic, and nothing written under the output directory.
func TestHostileStacksAreRefused(t *testing.T) {
	files, err := filepath.Glob(filepath.Join("testdata", "hostile", "Pulumi.*.yaml"))
	if err != nil || len(files) < 40 {
		t.Fatalf("%d hostile stacks (%v), want at least 40", len(files), err)
	}
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	for _, file := range files {
		stack := strings.TrimSuffix(strings.TrimPrefix(filepath.Base(file), "Pulumi."), ".yaml")
		t.Run(stack, func(t *testing.T) {
			t.Parallel()
			data, err := os.ReadFile(file)
			if err != nil {
				t.Fatal(err)
			}
			m := want.FindSubmatch(data)
			if m == nil {
				t.Fatalf("%s has no '# want: <field path>' line", file)
			}
			out := t.TempDir()
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			cmd := exec.CommandContext(ctx, self, "plan", "--stack", stack, "--stacks", filepath.Dir(file), "--out", out)
			cmd.Env = append(os.Environ(), "CLUSTERFORGE_FORGE_MAIN=1")
			var stderr bytes.Buffer
			cmd.Stdout, cmd.Stderr = &stderr, &stderr
			err = cmd.Run()
			msg := stderr.String()
			switch {
			case ctx.Err() != nil:
				t.Fatalf("still running after a minute:\n%.2000s", msg)
			case err == nil:
				t.Fatalf("accepted:\n%.2000s", msg)
			case strings.Contains(msg, "panic") || strings.Contains(msg, "goroutine "):
				t.Fatalf("panicked:\n%.2000s", msg)
			case !strings.Contains(msg, "clusterforge:cluster."+string(m[1])+":"):
				t.Errorf("the error does not name clusterforge:cluster.%s:\n%.2000s", m[1], msg)
			}
			if entries, _ := os.ReadDir(out); len(entries) > 0 {
				t.Errorf("wrote %d entries under the output directory", len(entries))
			}
		})
	}
}
