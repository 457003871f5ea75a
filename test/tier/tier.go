// Package tier says which tier runs a test, by its name. The fast tier (`make check`, no root)
// runs every test but those named TestAsRoot… (they need root: namespaces, mounts, cgroups, chroot)
// and TestRealEtcd… (they run the pinned etcd, which the fast tier does not build); the end-to-end
// tier (`make e2e`, root, after `make tools`) runs those first. Neither tier skips a test: a test
// that cannot run where its name sends it fails.
package tier

import (
	"os"
	"strings"
	"testing"
)

// Prefixes of the tests the fast tier leaves to the end-to-end tier.
const (
	RootPrefix = "TestAsRoot"
	EtcdPrefix = "TestRealEtcd"
)

// Root fails a test that needs root unless it is named for the tier that has it and runs as root.
func Root(t testing.TB) {
	t.Helper()
	Named(t, RootPrefix)
	if os.Geteuid() != 0 {
		t.Fatalf("%s needs root: `make e2e` runs it (as root)", t.Name())
	}
}

// Named fails a test whose name does not start with prefix: the tiers choose tests by name.
func Named(t testing.TB, prefix string) {
	t.Helper()
	if !strings.HasPrefix(t.Name(), prefix) {
		t.Fatalf("%s must be named %s…: the fast tier would run it (test/tier)", t.Name(), prefix)
	}
}
