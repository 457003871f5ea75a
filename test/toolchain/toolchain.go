// Package toolchain finds the pinned binaries `make tools` builds into .tools, for tests that run
// the real thing.
package toolchain

import (
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"

	"github.com/clusterforge/clusterforge/test/tier"
)

// dir is the repository's .tools directory.
func dir() string {
	_, file, _, _ := runtime.Caller(0)
	return filepath.Join(filepath.Dir(file), "..", "..", ".tools")
}

// Binary is path under .tools (e.g. "bin/promtool"); a missing one fails the test. The fast tier
// builds what its tests run (scripts/toolchain.sh checks); a test that runs etcd is named for the
// end-to-end tier, which builds it (test/tier).
func Binary(t testing.TB, path string) string {
	t.Helper()
	if strings.HasPrefix(filepath.Base(path), "etcd") && !strings.HasPrefix(t.Name(), "Benchmark") {
		tier.Named(t, tier.EtcdPrefix)
	}
	bin := filepath.Join(dir(), path)
	if _, err := os.Stat(bin); err != nil {
		t.Fatalf("%s is missing: run `make tools`", bin)
	}
	return bin
}
