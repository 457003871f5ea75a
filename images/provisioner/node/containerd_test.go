package node

import (
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/clusterforge/clusterforge/test/containerdcfg"
	"github.com/clusterforge/clusterforge/test/toolchain"

	"github.com/clusterforge/clusterforge/components/machine"
	"github.com/clusterforge/clusterforge/components/spec"
)

// The pinned containerd reads the rendered config, for CPU and GPU images, and applies every
// setting the lessons ask for.
func TestContainerdAcceptsRenderedConfig(t *testing.T) {
	for _, gpu := range []bool{false, true} {
		t.Run(map[bool]string{false: "runc", true: "nvidia"}[gpu], func(t *testing.T) {
			c := prod7500(t)
			dump := containerdConfigDump(t, c, gpu)
			for _, want := range containerdcfg.Settings(c, gpu) {
				if !strings.Contains(dump, want) {
					t.Errorf("containerd's effective config lacks %s", want)
				}
			}
		})
	}
}

// A hostile pause image (validation bypassed) stays the value of the sandbox image: it adds no key
// or table to containerd's config.
func TestContainerdConfigKeepsHostileValues(t *testing.T) {
	c := prod7500(t)
	c.Versions.PauseImage = "registry.k8s.io/pause:3.10\"\nmax_concurrent_downloads = 1\n[plugins.evil]\n#\\ \u0007"
	dump := containerdConfigDump(t, c, false)
	if !strings.Contains(dump, "max_concurrent_downloads = 10") || regexp.MustCompile(`(?m)^\s*\[plugins\.evil\]`).MatchString(dump) ||
		!regexp.MustCompile(`(?m)^\s*sandbox = .*max_concurrent_downloads = 1.*plugins.evil`).MatchString(dump) {
		t.Errorf("the hostile pause image changed containerd's config:\n%s", dump)
	}
}

func prod7500(t *testing.T) *spec.Cluster {
	c, err := spec.LoadStack(filepath.Join("..", "..", "..", "stacks", "Pulumi.prod-7500.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func containerdConfigDump(t *testing.T, c *spec.Cluster, gpu bool) string {
	containerd := toolchain.Binary(t, "node/containerd")
	config := filepath.Join(t.TempDir(), "config.toml")
	if err := os.WriteFile(config, []byte(machine.ContainerdConfig(c, gpu)), 0o644); err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command(containerd, "--config", config, "config", "dump").CombinedOutput()
	if err != nil {
		t.Fatalf("containerd config dump: %v\n%s", err, out)
	}
	dump := string(out)
	if strings.Contains(dump, "level=warning") || strings.Contains(dump, "level=error") {
		t.Errorf("containerd complains about the config:\n%s", dump)
	}
	return dump
}

// The runc the image carries supports seccomp: containerd gives every pod sandbox a seccomp
// profile, and a runc built without it fails every pod ("seccomp not supported").
func TestBakedRuncSupportsSeccomp(t *testing.T) {
	out, err := exec.Command(filepath.Join("..", "..", "..", ".tools", "node", "runc"), "--version").CombinedOutput()
	if err != nil {
		t.Fatalf("runc --version: %v: %s (run `make tools`)", err, out)
	}
	if !strings.Contains(string(out), "libseccomp:") {
		t.Errorf("runc is built without seccomp:\n%s", out)
	}
}
