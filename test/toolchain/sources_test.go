package toolchain

import (
	"os"
	"os/exec"
	"path/filepath"
	"testing"
)

// A fresh machine's module cache is empty: the files the toolchain copies from modules' sources
// must come from modules it downloads itself. The script runs from a copy of the files it reads,
// so that it writes into a .tools of the test's own, on a module cache of the test's own.
func TestSourcesResolveOnAnEmptyModuleCache(t *testing.T) {
	if _, err := exec.LookPath("jq"); err != nil {
		t.Fatal("jq is missing: run `make setup`")
	}
	repo := t.TempDir()
	for _, path := range []string{"go.mod", "go.sum", "components/spec/versions.yaml", "scripts/toolchain.sh", "scripts/cache.sh", "scripts/toolchain"} {
		if err := os.MkdirAll(filepath.Dir(filepath.Join(repo, path)), 0o755); err != nil {
			t.Fatal(err)
		}
		if out, err := exec.Command("cp", "-r", filepath.Join("..", "..", path), filepath.Join(repo, path)).CombinedOutput(); err != nil {
			t.Fatalf("copying %s: %v: %s", path, err, out)
		}
	}
	cmd := exec.Command("bash", filepath.Join(repo, "scripts", "toolchain.sh"), "sources")
	cmd.Env = append(os.Environ(), "GOMODCACHE="+t.TempDir(), "GOFLAGS="+os.Getenv("GOFLAGS")+" -modcacherw")
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("scripts/toolchain.sh sources on an empty module cache: %v\n%s", err, out)
	}
	for _, want := range []string{
		"share/pulumi-kubernetes/main.go", "share/pulumi-kubernetes/schema-embed.json",
		"share/pulumi-kubernetes/terraform-mapping-embed.json", "share/kube-bench/cfg/config.yaml", "share/kwok/pod-stages.yaml",
	} {
		if info, err := os.Stat(filepath.Join(repo, ".tools", want)); err != nil || info.Size() == 0 {
			t.Errorf(".tools/%s is missing or empty after `scripts/toolchain.sh sources`:\n%s", want, out)
		}
	}
}
