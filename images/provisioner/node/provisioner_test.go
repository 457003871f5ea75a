package node

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	packersdk "github.com/hashicorp/packer-plugin-sdk/packer"

	"github.com/clusterforge/clusterforge/components/machine"
	"github.com/clusterforge/clusterforge/components/spec"
	"github.com/clusterforge/clusterforge/test/tier"
)

var update = flag.Bool("update", false, "rewrite testdata/provision*.golden")

const (
	pauseDigest = "sha256:7c38f24774e3cbd906d2d33c38354ccf787635581c122965132c9bd309754d4a"
	appImage    = "example.azurecr.io/training/app:v1"
	appDigest   = "sha256:2222222222222222222222222222222222222222222222222222222222222222"
)

// recorder is packer-plugin-sdk's MockCommunicator, remembering every command and upload in order.
// The installed binaries answer --version as the real ones do (reports), or as versions says.
type recorder struct {
	packersdk.MockCommunicator
	log      []string
	versions map[string]string
}

// reports are the pinned binaries' --version output, in each binary's own words (as the
// toolchain's builds print them).
var reports = map[string]string{
	"kubelet":        "Kubernetes " + spec.DefaultKubernetesVersion + "\n",
	"kube-apiserver": "Kubernetes " + spec.DefaultKubernetesVersion + "\n",
	"containerd":     "containerd github.com/containerd/containerd/v2 " + spec.DefaultContainerdVersion + " \n",
	"runc":           "runc version " + strings.TrimPrefix(spec.DefaultRuncVersion, "v") + "\nspec: 1.3.0\ngo: go1.26.8\nlibseccomp: 2.5.4\n",
	"crictl":         "crictl version " + spec.DefaultCrictlVersion + "\n",
	"etcd":           "etcd Version: " + strings.TrimPrefix(spec.DefaultEtcdVersion, "v") + "\nGit SHA: Not provided (use ./build instead of go build)\nGo Version: go1.26.8\nGo OS/Arch: linux/amd64\n",
}

// versionCommand is a bake's --version question to an installed binary, with or without sudo.
var versionCommand = regexp.MustCompile(`/([a-z-]+)[^/\s]*\s+--version`)

func (r *recorder) Start(ctx context.Context, rc *packersdk.RemoteCmd) error {
	r.log = append(r.log, "run    "+rc.Command)
	if m := versionCommand.FindStringSubmatch(rc.Command); m != nil {
		name := m[1]
		out, ok := r.versions[name]
		if !ok {
			out = reports[name]
		}
		_, _ = io.WriteString(rc.Stdout, out)
		go rc.SetExited(0)
		return nil
	}
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

// fixture is a valid worker configuration over fake binaries and a fake image archive.
func fixture(t *testing.T) map[string]interface{} {
	t.Helper()
	dir := t.TempDir()
	bin := filepath.Join(dir, "bin")
	for _, name := range machine.ImageBinaries[machine.ImageWorker] {
		write(t, filepath.Join(bin, name), "binary "+name)
	}
	for _, name := range machine.CNIPlugins {
		write(t, filepath.Join(bin, "cni", name), "plugin "+name)
	}
	archive := filepath.Join(dir, "pause.oci.tar")
	write(t, archive, "oci archive")
	return map[string]interface{}{
		"stack":        filepath.Join("..", "..", "..", "stacks", "Pulumi.dev.yaml"),
		"binaries_dir": bin,
		"preload_image": []map[string]interface{}{
			{"name": spec.DefaultPauseImage, "archive": archive, "digest": pauseDigest},
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

// controlPlaneFixture is a valid control-plane configuration over fake binaries.
func controlPlaneFixture(t *testing.T) map[string]interface{} {
	t.Helper()
	dir := t.TempDir()
	for _, name := range machine.ImageBinaries[machine.ImageControlPlane] {
		write(t, filepath.Join(dir, "bin", name), "binary "+name)
	}
	return map[string]interface{}{
		"role":            machine.ImageControlPlane,
		"stack":           filepath.Join("..", "..", "..", "stacks", "Pulumi.dev.yaml"),
		"binaries_dir":    filepath.Join(dir, "bin"),
		"manifest_output": filepath.Join(dir, "manifest.json"),
	}
}

// The exact commands and uploads of a bake, reviewed as a golden file per role (go test -update).
func TestProvisionCommandsAndUploads(t *testing.T) {
	for _, tc := range []struct {
		golden string
		config func(*testing.T) map[string]interface{}
		check  func(manifest) bool
	}{
		{"provision.golden", fixture, func(m manifest) bool {
			return m.Role == "worker" && m.Versions["kubelet"] == spec.DefaultKubernetesVersion && m.Versions["containerd"] == spec.DefaultContainerdVersion && m.Versions["etcd"] == "" &&
				len(m.Images) == 2 && m.Images[0].Digest == pauseDigest && m.Images[1].Digest == appDigest
		}},
		{"provision-gpu.golden", func(t *testing.T) map[string]interface{} {
			cfg := fixture(t)
			cfg["gpu"] = true
			return cfg
		}, func(m manifest) bool { return m.Role == "worker" }},
		{"provision-control-plane.golden", controlPlaneFixture, func(m manifest) bool {
			return m.Role == "control-plane" && m.Versions["kubernetes"] == spec.DefaultKubernetesVersion && m.Versions["etcd"] == spec.DefaultEtcdVersion &&
				m.Versions["containerd"] == "" && len(m.Images) == 0
		}},
	} {
		t.Run(tc.golden, func(t *testing.T) {
			cfg := tc.config(t)
			var p Provisioner
			if err := p.Prepare(cfg); err != nil {
				t.Fatal(err)
			}
			comm := &recorder{}
			if err := p.Provision(context.Background(), packersdk.TestUi(t), comm, nil); err != nil {
				t.Fatal(err)
			}
			got := strings.Join(comm.log, "\n") + "\n"
			golden := filepath.Join("testdata", tc.golden)
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
			if !tc.check(m) {
				t.Errorf("manifest %+v", m)
			}
		})
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

// A binary that reports another release than the stack pins fails the bake, by name, and no
// manifest is written.
func TestBinaryOfAnotherReleaseFailsTheBake(t *testing.T) {
	cfg := fixture(t)
	var p Provisioner
	if err := p.Prepare(cfg); err != nil {
		t.Fatal(err)
	}
	comm := &recorder{versions: map[string]string{"kubelet": "Kubernetes " + spec.PreviousKubernetesVersion + "\n"}}
	err := p.Provision(context.Background(), packersdk.TestUi(t), comm, nil)
	if err == nil || !strings.Contains(err.Error(), "kubelet reports "+spec.PreviousKubernetesVersion+", the stack pins kubelet "+spec.DefaultKubernetesVersion) {
		t.Fatalf("error %v, want the kubelet's release refused", err)
	}
	if _, err := os.Stat(cfg["manifest_output"].(string)); err == nil {
		t.Error("a manifest was written for the refused bake")
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
		{"staging dir with a space", func(c map[string]interface{}) { c["staging_dir"] = "/var/tmp/a b" }, "staging_dir"},
		{"relative staging dir", func(c map[string]interface{}) { c["staging_dir"] = "tmp/../x" }, "staging_dir"},
		{"unknown role", func(c map[string]interface{}) { c["role"] = "etcd" }, "role: \"etcd\" is not an image role"},
		{"control plane with preloads", func(c map[string]interface{}) { c["role"] = "control-plane" }, "preload_image: the control-plane image runs no containers"},
		{"control plane without its binaries", func(c map[string]interface{}) {
			c["role"], c["preload_image"] = "control-plane", nil
		}, "binaries_dir: "},
		{"image name with a command", func(c map[string]interface{}) {
			c["preload_image"].([]map[string]interface{})[1]["name"] = "example.com/a:v1; reboot"
		}, "preload_image[1].name"},
		{"tags claiming another kubelet", func(c map[string]interface{}) {
			c["version_tags"] = map[string]string{"versions.kubelet": spec.PreviousKubernetesVersion}
		}, "version_tags: "},
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

// Hostile option values (Prepare bypassed) reach the remote shell as single arguments: every
// command of a bake is replayed through the real sh, as nobody, with each program it calls
// replaced by a stub that records its argv; no injected command runs.
func TestAsRootHostileOptionsStayOneArgument(t *testing.T) {
	work := sharedDir(t)
	canary := filepath.Join(work, "CANARY") // the commands run in work
	inject := "'; touch CANARY; ' $(touch CANARY) `touch CANARY` \"$(touch CANARY)\" ; touch CANARY"
	hostileName := "example.com/app:v1 " + inject
	cfg := fixture(t)
	for _, sudo := range []bool{false, true} {
		var p Provisioner
		if err := p.Prepare(cfg); err != nil {
			t.Fatal(err)
		}
		p.config.StagingDir = filepath.Join(work, "stage "+inject)
		p.config.UseSudo = sudo
		p.config.PreloadImages[1].Name = hostileName
		comm := &recorder{}
		if err := p.Provision(context.Background(), packersdk.TestUi(t), comm, nil); err != nil {
			t.Fatal(err)
		}
		calls := replay(t, work, comm.log)
		if _, err := os.Stat(canary); err == nil {
			t.Fatalf("sudo %v: an injected command ran", sudo)
		}
		var pulled, matched bool
		for _, argv := range calls {
			pulled = pulled || len(argv) > 3 && slices.Equal(argv[len(argv)-3:], []string{"--snapshotter", "overlayfs", hostileName})
			matched = matched || (argv[0] == "awk" && slices.Contains(argv, "name="+hostileName))
		}
		if !pulled || !matched {
			t.Errorf("sudo %v: ctr pulled %v and awk matched %v the hostile name as one argument; calls:\n%q", sudo, pulled, matched, calls)
		}
	}
}

// replay runs every recorded command with sh as nobody in work, where PATH and /usr/local/bin
// (the binaries the bake calls by path) hold only stubs that log their argv, and returns the calls.
func replay(t *testing.T, work string, log []string) [][]string {
	t.Helper()
	tier.Root(t)
	stubs, calls := filepath.Join(work, "stubs"), filepath.Join(work, "calls")
	// Each call is one line of hex-encoded words, written at once: a pipeline's stubs run together.
	stub := "#!/bin/sh\nhex() { printf '%s' \"$1\" | /usr/bin/od -An -v -tx1 | /usr/bin/tr -d ' \\n'; }\n" +
		"line=$(hex \"${0##*/}\"); for a; do line=\"$line $(hex \"$a\")\"; done\nprintf '%s\\n' \"$line\" >>" + calls + "\n"
	for _, name := range []string{"install", "rm", "mkdir", "systemctl", "containerd", "ctr", "awk", "seq", "sleep", "cat", "truncate", "find", "cloud-init"} {
		write(t, filepath.Join(stubs, name), stub)
	}
	// sudo runs its command through the real sh, as it would.
	write(t, filepath.Join(stubs, "sudo"), stub+"exec /bin/sh -c \"$4\"\n")
	os.Remove(calls)
	for _, entry := range log {
		command, ok := strings.CutPrefix(entry, "run    ")
		if !ok {
			continue
		}
		cmd := exec.Command("unshare", "--mount", "--propagation", "private", "/bin/sh", "-c",
			`/bin/mount --bind "$0" /usr/local/bin && exec /usr/bin/setpriv --reuid=65534 --regid=65534 --clear-groups /bin/sh -c "$1"`,
			stubs, command)
		cmd.Dir, cmd.Env = work, []string{"PATH=" + stubs}
		_ = cmd.Run() // the stubs print nothing, so checks fail; only the calls matter
	}
	data, err := os.ReadFile(calls)
	if err != nil {
		t.Fatal(err)
	}
	var out [][]string
	for _, line := range strings.Split(strings.TrimSpace(string(data)), "\n") {
		var argv []string
		for _, field := range strings.Split(line, " ") {
			b, err := hex.DecodeString(field)
			if err != nil {
				t.Fatalf("stub log %q: %v", line, err)
			}
			argv = append(argv, string(b))
		}
		out = append(out, argv)
	}
	return out
}

// sharedDir is a temporary directory the user nobody may write to (t.TempDir's parent is private).
func sharedDir(t *testing.T) string {
	dir, err := os.MkdirTemp("", "clusterforge-replay-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	if err := os.Chmod(dir, 0o777); err != nil {
		t.Fatal(err)
	}
	return dir
}

// A machine's first boot takes the image the bake wrote the manifest of, for the stack it was
// baked for, and refuses it, naming the field, for a stack that pins another release.
func TestFirstBootChecksTheBakedManifest(t *testing.T) {
	for _, tc := range []struct {
		image  string
		config func(*testing.T) map[string]interface{}
		other  func(*spec.Versions)
		field  string
	}{
		{machine.ImageWorker, fixture, func(v *spec.Versions) { v.Containerd = "v2.0.0" }, "versions.containerd v2.0.0"},
		{machine.ImageWorker, fixture, func(v *spec.Versions) { v.Kubelet = spec.PreviousKubernetesVersion }, "versions.kubelet " + spec.PreviousKubernetesVersion},
		{machine.ImageControlPlane, controlPlaneFixture, func(v *spec.Versions) { v.Etcd = spec.PreviousEtcdVersion }, "versions.etcd " + spec.PreviousEtcdVersion},
	} {
		cfg := tc.config(t)
		var p Provisioner
		if err := p.Prepare(cfg); err != nil {
			t.Fatal(err)
		}
		if err := p.Provision(context.Background(), packersdk.TestUi(t), &recorder{}, nil); err != nil {
			t.Fatal(err)
		}
		stack, err := spec.LoadStack(cfg["stack"].(string))
		if err != nil {
			t.Fatal(err)
		}
		boot := func(v spec.Versions) (string, error) {
			out, err := exec.Command("sh", "-c", machine.ImageCheckScript(v, tc.image), "image-check", cfg["manifest_output"].(string)).CombinedOutput()
			return string(out), err
		}
		if out, err := boot(stack.Versions); err != nil {
			t.Errorf("%s image, its own stack's versions: %v: %s", tc.image, err, out)
		}
		other := stack.Versions
		tc.other(&other)
		if out, err := boot(other); err == nil || !strings.Contains(out, "the stack pins "+tc.field) {
			t.Errorf("%s image, a stack pinning %s: %v: %q; want it refused, naming the field", tc.image, tc.field, err, out)
		}
	}
}

// The tags a publish gives the gallery image version are what the bake installs: the stack's.
func TestVersionTagsAreTheStacks(t *testing.T) {
	cfg := fixture(t)
	stack, err := spec.LoadStack(cfg["stack"].(string))
	if err != nil {
		t.Fatal(err)
	}
	cfg["version_tags"] = machine.ImageTags(stack.Versions, machine.ImageWorker)
	var p Provisioner
	if err := p.Prepare(cfg); err != nil {
		t.Errorf("the stack's own tags: %v", err)
	}
}
