package machine

import (
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// TestJoinJitterSleepsWithinItsBound runs the rendered script under /bin/sh with a sleep that
// only records its argument: every delay is within 0..seconds and they differ.
func TestJoinJitterSleepsWithinItsBound(t *testing.T) {
	const seconds = 7
	dir := t.TempDir()
	script := filepath.Join(dir, "join-jitter")
	if err := os.WriteFile(script, []byte(joinJitter(seconds).files[0].Content), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "sleep"), []byte("#!/bin/sh\necho \"$1\"\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	seen := map[int]bool{}
	for range 100 {
		cmd := exec.Command("/bin/sh", script)
		cmd.Env = []string{"PATH=" + dir + ":/usr/bin:/bin"}
		out, err := cmd.Output()
		if err != nil {
			t.Fatalf("%v: %s", err, out)
		}
		n, err := strconv.Atoi(strings.TrimSpace(string(out)))
		if err != nil || n < 0 || n > seconds {
			t.Fatalf("slept %q: want a whole number of seconds from 0 to %d", out, seconds)
		}
		seen[n] = true
	}
	if len(seen) < seconds/2 {
		t.Errorf("100 boots chose only the delays %v: not spread", seen)
	}
}
