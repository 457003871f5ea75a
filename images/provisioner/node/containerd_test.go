package node

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/clusterforge/clusterforge/components/machine"
	"github.com/clusterforge/clusterforge/components/spec"
)

// The pinned containerd reads the rendered config and applies every setting the lessons ask for.
func TestContainerdAcceptsRenderedConfig(t *testing.T) {
	containerd := filepath.Join("..", "..", "..", ".tools", "node", "containerd")
	if _, err := os.Stat(containerd); err != nil {
		t.Fatalf("%s is missing: run `make tools`", containerd)
	}
	c, err := spec.LoadStack(filepath.Join("..", "..", "..", "stacks", "Pulumi.prod-7500.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	config := filepath.Join(t.TempDir(), "config.toml")
	if err := os.WriteFile(config, []byte(machine.ContainerdConfig(c)), 0o644); err != nil {
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
	for _, want := range []string{
		`root = "/var/lib/containerd"`,
		`snapshotter = "overlayfs"`,
		`max_concurrent_downloads = 10`,
		`image_pull_progress_timeout = "5m0s"`,
		`sandbox_image = "registry.k8s.io/pause:3.10.1"`,
		`SystemdCgroup = true`,
	} {
		if !strings.Contains(dump, want) {
			t.Errorf("containerd's effective config lacks %s", want)
		}
	}
}
