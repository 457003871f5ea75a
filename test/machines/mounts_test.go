package machines

import (
	"os"
	"path/filepath"
	"syscall"
	"testing"

	"github.com/clusterforge/clusterforge/test/tier"
)

// Mounts nested below a rehearsal's directory all go, and a mount beside it stays.
func TestAsRootDetachMountsTakesEveryMountBelowTheDirectory(t *testing.T) {
	tier.Root(t)
	root := t.TempDir()
	dir, outer, inner, beside := filepath.Join(root, "rehearsal"), filepath.Join(root, "rehearsal", "disks"), filepath.Join(root, "rehearsal", "disks", "m", "data"), filepath.Join(root, "rehearsal-2")
	for _, d := range []string{outer, beside} {
		if err := os.MkdirAll(d, 0o700); err != nil {
			t.Fatal(err)
		}
	}
	for _, m := range []string{outer, inner, beside} {
		if err := os.MkdirAll(m, 0o700); err != nil {
			t.Fatal(err)
		}
		if err := syscall.Mount("tmpfs", m, "tmpfs", 0, ""); err != nil {
			t.Fatal(err)
		}
	}
	defer func() { _ = syscall.Unmount(beside, syscall.MNT_DETACH) }()
	if err := DetachMounts(dir); err != nil {
		t.Fatal(err)
	}
	for _, m := range []string{outer, inner} {
		if Mounted(m) {
			t.Errorf("%s is still mounted", m)
		}
	}
	if !Mounted(beside) {
		t.Errorf("%s, beside the directory, was unmounted", beside)
	}
}
