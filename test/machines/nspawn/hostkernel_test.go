package nspawn

import (
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/clusterforge/clusterforge/components/machine"
)

// setHostKernel against a stand-in /proc/sys, with the worker image's real sysctls: protected
// settings set exactly, shared limits only ever raised, nothing else touched.
func TestSetHostKernelSetsProtectedValuesAndRaisesSharedLimits(t *testing.T) {
	dir := t.TempDir()
	host := map[string]string{
		"vm/overcommit_memory":          "0",       // the kubelet needs 1
		"vm/panic_on_oom":               "0",       // already right
		"kernel/panic":                  "0",       // the kubelet needs 10
		"kernel/panic_on_oops":          "1",       // right
		"kernel/keys/root_maxkeys":      "1000000", // right
		"kernel/keys/root_maxbytes":     "25000000",
		"fs/inotify/max_user_instances": "128",     // the default that starved containerd's CRI plugin
		"fs/inotify/max_user_watches":   "4194304", // above the image's: kept
		"net/ipv4/ip_forward":           "0",       // a machine's own namespace: not this host's business
	}
	for path, value := range host {
		file := filepath.Join(dir, path)
		if err := os.MkdirAll(filepath.Dir(file), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(file, []byte(value+"\n"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	changed, err := setHostKernel(dir, machine.Sysctls)
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"vm.overcommit_memory: 0 → 1", "kernel.panic: 0 → 10", "fs.inotify.max_user_instances: 128 → 8192"}
	if !slices.Equal(changed, want) {
		t.Errorf("changed %q, want %q", changed, want)
	}
	for path, value := range map[string]string{"fs/inotify/max_user_instances": "8192", "fs/inotify/max_user_watches": "4194304\n", "net/ipv4/ip_forward": "0\n", "vm/overcommit_memory": "1"} {
		got, err := os.ReadFile(filepath.Join(dir, path))
		if err != nil {
			t.Fatal(err)
		}
		if string(got) != value {
			t.Errorf("%s = %q, want %q", path, got, value)
		}
	}
}
