// Package toolchain finds the pinned binaries `make tools` builds into .tools, for tests that run
// the real thing.
package toolchain

import (
	"os"
	"path/filepath"
	"runtime"
	"testing"
)

// dir is the repository's .tools directory.
func dir() string {
	_, file, _, _ := runtime.Caller(0)
	return filepath.Join(filepath.Dir(file), "..", "..", ".tools")
}

// Binary is path under .tools (e.g. "bin/promtool"). A missing one skips the test under -short
// (the fast tier may run before `make tools`) and fails it otherwise.
func Binary(t testing.TB, path string) string {
	t.Helper()
	bin := filepath.Join(dir(), path)
	if _, err := os.Stat(bin); err != nil {
		if testing.Short() {
			t.Skipf("-short: %s is not built", path)
		}
		t.Fatalf("%s is missing: run `make tools`", bin)
	}
	return bin
}
