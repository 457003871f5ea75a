package node

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	packersdk "github.com/hashicorp/packer-plugin-sdk/packer"
)

var update = flag.Bool("update", false, "rewrite testdata/provision.golden")

const (
	pauseDigest = "sha256:7c38f24774e3cbd906d2d33c38354ccf787635581c122965132c9bd309754d4a"
	appImage    = "example.azurecr.io/training/app:v1"
	appDigest   = "sha256:2222222222222222222222222222222222222222222222222222222222222222"
)

// recorder is packer-plugin-sdk's MockCommunicator, remembering every command and upload in order.
type recorder struct {
	packersdk.MockCommunicator
	log []string
}

func (r *recorder) Start(ctx context.Context, rc *packersdk.RemoteCmd) error {
	r.log = append(r.log, "run    "+rc.Command)
	return r.MockCommunicator.Start(ctx, rc)
}

func (r *recorder) Upload(path string, data io.Reader, fi *os.FileInfo) error {
	content, err := io.ReadAll(data)
	if err != nil {
		return err
	}
	r.log = append(r.log, fmt.Sprintf("upload %s (%d bytes, sha256:%x)", path, len(content), sha256.Sum256(content)))
	return r.MockCommunicator.Upload(path, bytes.NewReader(content), fi)
}

// fixture is a valid configuration over fake binaries and a fake image archive.
func fixture(t *testing.T) map[string]interface{} {
	t.Helper()
	dir := t.TempDir()
	bin := filepath.Join(dir, "bin")
	for _, name := range append(RequiredBinaries, "cni/azure-vnet", "cni/loopback") {
		write(t, filepath.Join(bin, name), "binary "+name)
	}
	archive := filepath.Join(dir, "pause.oci.tar")
	write(t, archive, "oci archive")
	return map[string]interface{}{
		"stack":        filepath.Join("..", "..", "..", "stacks", "Pulumi.dev.yaml"),
		"binaries_dir": bin,
		"preload_image": []map[string]interface{}{
			{"name": "registry.k8s.io/pause:3.10.1", "archive": archive, "digest": pauseDigest},
			{"name": appImage, "digest": appDigest}, // no archive: pulled from its registry
		},
		"manifest_output": filepath.Join(dir, "manifest.json"),
	}
}

func write(t *testing.T, path, content string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte(content), 0o755); err != nil {
		t.Fatal(err)
	}
}

// The exact commands and uploads of a bake, reviewed as a golden file (go test -update).
func TestProvisionCommandsAndUploads(t *testing.T) {
	cfg := fixture(t)
	var p Provisioner
	if err := p.Prepare(cfg); err != nil {
		t.Fatal(err)
	}
	comm := &recorder{}
	if err := p.Provision(context.Background(), packersdk.TestUi(t), comm, nil); err != nil {
		t.Fatal(err)
	}
	got := strings.Join(comm.log, "\n") + "\n"
	golden := filepath.Join("testdata", "provision.golden")
	if *update {
		write(t, golden, got)
	}
	want, err := os.ReadFile(golden)
	if err != nil {
		t.Fatal(err)
	}
	if got != string(want) {
		t.Errorf("commands and uploads differ from %s (go test -update rewrites it):\n%s", golden, got)
	}
	var m manifest
	data, err := os.ReadFile(cfg["manifest_output"].(string))
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(data, &m); err != nil {
		t.Fatal(err)
	}
	if m.Kubernetes != "v1.34.1" || m.Containerd != "v1.7.28" || len(m.Images) != 2 || m.Images[0].Digest != pauseDigest || m.Images[1].Digest != appDigest {
		t.Errorf("manifest %+v", m)
	}
}

func TestFailedCommandStopsTheBake(t *testing.T) {
	var p Provisioner
	if err := p.Prepare(fixture(t)); err != nil {
		t.Fatal(err)
	}
	comm := &recorder{MockCommunicator: packersdk.MockCommunicator{StartExitStatus: 1}}
	err := p.Provision(context.Background(), packersdk.TestUi(t), comm, nil)
	if err == nil || !strings.Contains(err.Error(), "install the pinned binaries") {
		t.Fatalf("error %v, want the failing step named", err)
	}
	if len(comm.log) != 1 {
		t.Errorf("the bake went on after a failed command: %v", comm.log)
	}
}

func TestPrepareNamesTheOption(t *testing.T) {
	for _, tc := range []struct {
		name   string
		edit   func(map[string]interface{})
		option string
	}{
		{"no stack", func(c map[string]interface{}) { delete(c, "stack") }, "stack: required"},
		{"bad stack", func(c map[string]interface{}) { c["stack"] = "stacks/nope.yaml" }, "stack: open stacks/nope.yaml"},
		{"no binaries", func(c map[string]interface{}) { c["binaries_dir"] = t.TempDir() }, "binaries_dir: "},
		{"bad digest", func(c map[string]interface{}) {
			c["preload_image"].([]map[string]interface{})[0]["digest"] = "latest"
		}, "preload_image[0].digest"},
		{"missing archive", func(c map[string]interface{}) {
			c["preload_image"].([]map[string]interface{})[0]["archive"] = "/nonexistent.tar"
		}, "preload_image[0].archive"},
		{"no pause image", func(c map[string]interface{}) {
			c["preload_image"].([]map[string]interface{})[0]["name"] = "example.com/dota:1"
		}, "preload_image: none is the stack's pause image"},
		{"unknown option", func(c map[string]interface{}) { c["binaries"] = "x" }, "binaries"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := fixture(t)
			tc.edit(cfg)
			var p Provisioner
			err := p.Prepare(cfg)
			if err == nil || !strings.Contains(err.Error(), tc.option) {
				t.Fatalf("Prepare: %v, want an error naming %q", err, tc.option)
			}
		})
	}
}
