package image_test

import (
	"bufio"
	"context"
	"encoding/json"
	"flag"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/clusterforge/clusterforge/components/machine"
	"github.com/clusterforge/clusterforge/components/wellknown"
	"github.com/clusterforge/clusterforge/test/drills"
	"github.com/clusterforge/clusterforge/test/e2e/framework"
	"github.com/clusterforge/clusterforge/test/rehearsal"
)

var bakedImage = flag.String("image", "", "node image tarball (default build/images/node-<stack>.tar, from `make image-local`); "+
	"its preload list is beside it, in <name>.preload/preload.pkrvars.json")

// preloaded is what images/cmd/mkimages wrote for the bake: the images and digests it expects.
type preloaded struct {
	PreloadImages []struct{ Name, Digest string } `json:"preload_images"`
}

// stackImage is the stack's baked image, from `make image-local` unless -image names another.
func stackImage() string {
	if *bakedImage != "" {
		return *bakedImage
	}
	return filepath.Join(framework.RepoRoot, "build", "images", "node-"+framework.Stack()+".tar")
}

// readPreloaded reads the preload list baked into image, or fails saying what is missing.
func readPreloaded(t testing.TB, image string) preloaded {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Fatal("booting a baked image needs root (loop devices, mount namespaces, chroot); run make test as root")
	}
	var want preloaded
	data, err := os.ReadFile(strings.TrimSuffix(image, ".tar") + ".preload/preload.pkrvars.json")
	if err == nil {
		err = json.Unmarshal(data, &want)
	}
	if _, statErr := os.Stat(image); statErr != nil || err != nil {
		t.Fatalf("no baked image to check (%v, %v): run `make image-local STACK=%s`", statErr, err, framework.Stack())
	}
	return want
}

// bootBakedNode boots the stack's baked image with the given units.
func bootBakedNode(t testing.TB, name string, units ...string) (*rehearsal.BakedNode, preloaded) {
	t.Helper()
	return bootImage(t, stackImage(), name, units...)
}

// bootImage boots a baked image with the given units; the node is shut down with the test.
func bootImage(t testing.TB, image, name string, units ...string) (*rehearsal.BakedNode, preloaded) {
	t.Helper()
	framework.SkipShort(t)
	want := readPreloaded(t, image)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	node, err := rehearsal.BootBakedNode(ctx, image, filepath.Join(framework.RepoRoot, "build", "rehearse", "baked-"+name), os.Stderr, units...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := node.Shutdown(); err != nil {
			t.Error(err)
		}
	})
	return node, want
}

// The baked image boots as a node does: containerd-disk.service formats the (stand-in) local SSD,
// seeds it with the baked images and mounts it as containerd's root (L22); then the baked
// containerd serves every preloaded image, by the digest the bake was given, with nothing to pull.
func TestBakedImageServesPreloadedImagesFromTheLocalDisk(t *testing.T) {
	node, want := bootBakedNode(t, "image-check", machine.ContainerdDiskUnit, machine.ContainerdUnit)
	ctx := context.Background()
	ctr := []string{machine.BinDir + "/ctr", "--address", wellknown.ContainerdSocketPath, "-n", "k8s.io"}

	var listing string
	err := drills.WaitUntil(30*time.Second, func() (err error) {
		listing, err = node.Exec(ctx, append(ctr, "images", "ls")...)
		return err
	})
	if err != nil {
		t.Fatalf("the baked containerd does not answer: %v", err)
	}
	got := map[string]string{} // name → digest
	for _, line := range strings.Split(listing, "\n")[1:] {
		if f := strings.Fields(line); len(f) > 2 {
			got[f[0]] = f[2]
		}
	}
	if len(want.PreloadImages) < 2 {
		t.Fatalf("the bake preloads %d images; want the pause image and at least one app image", len(want.PreloadImages))
	}
	for _, img := range want.PreloadImages {
		if got[img.Name] != img.Digest {
			t.Errorf("%s: containerd has digest %q, the bake was given %s", img.Name, got[img.Name], img.Digest)
		}
	}
	if !strings.Contains(listing, framework.Cluster.Versions.PauseImage) {
		t.Errorf("the stack's pause image %s is not preloaded (L25):\n%s", framework.Cluster.Versions.PauseImage, listing)
	}

	// Every image is unpacked for the overlayfs snapshotter; its compressed layers were discarded.
	check, err := node.Exec(ctx, append(ctr, "images", "check")...)
	if err != nil {
		t.Fatal(err)
	}
	for _, img := range want.PreloadImages {
		if !hasLineWithFields(check, img.Name, "true") {
			t.Errorf("%s is not unpacked:\n%s", img.Name, check)
		}
	}
	blobs, err := node.Exec(ctx, "du", "-sb", machine.ContainerdRoot+"/io.containerd.content.v1.content/blobs")
	if err != nil {
		t.Fatal(err)
	}
	if size, _ := strconv.Atoi(strings.Fields(blobs)[0]); size > 1<<20 {
		t.Errorf("the content store holds %d bytes: the compressed layers were not discarded after unpacking", size)
	}

	// containerd's root is the local disk the unit formatted, not the OS disk.
	mount, err := node.Exec(ctx, "findmnt", "-n", "-o", "SOURCE,FSTYPE,LABEL", machine.ContainerdRoot)
	if err != nil {
		t.Fatalf("%s is not a mount point: %v", machine.ContainerdRoot, err)
	}
	if f := strings.Fields(mount); len(f) < 3 || !strings.HasPrefix(f[0], "/dev/loop") || f[1] != "ext4" || f[2] != machine.ContainerdDiskLabel {
		t.Errorf("%s is mounted from %q; want the local disk (a loop device here), ext4, labelled %s", machine.ContainerdRoot, mount, machine.ContainerdDiskLabel)
	}

	// The config containerd actually runs with.
	dump, err := node.Exec(ctx, machine.BinDir+"/containerd", "--config", machine.ContainerdConfigPath, "config", "dump")
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{`snapshotter = "overlayfs"`, `max_concurrent_downloads = 10`,
		`sandbox_image = "` + framework.Cluster.Versions.PauseImage + `"`, `root = "` + machine.ContainerdRoot + `"`} {
		if !strings.Contains(dump, want) {
			t.Errorf("the baked containerd runs without %s", want)
		}
	}
}

// The sysctls the image applies at boot: the L27 neighbour-table thresholds, each key one the
// kernel knows, and the namespaced ones accepted by the kernel through the image's own sysctl.
func TestBakedImageSysctls(t *testing.T) {
	node, _ := bootBakedNode(t, "sysctl-check")
	ctx := context.Background()
	data, err := os.ReadFile(filepath.Join(node.Root, machine.SysctlPath))
	if err != nil {
		t.Fatal(err)
	}
	values := map[string]string{}
	sc := bufio.NewScanner(strings.NewReader(string(data)))
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if k, v, ok := strings.Cut(line, "="); ok && !strings.HasPrefix(line, "#") {
			values[strings.TrimSpace(k)] = strings.TrimSpace(v)
		}
	}
	for key, want := range map[string]string{
		"net.ipv4.neigh.default.gc_thresh1": "80000",
		"net.ipv4.neigh.default.gc_thresh2": "90000",
		"net.ipv4.neigh.default.gc_thresh3": "100000",
	} {
		if values[key] != want {
			t.Errorf("%s = %q in the image, want %s (L27)", key, values[key], want)
		}
	}
	for key, value := range values {
		if _, err := os.Stat("/proc/sys/" + strings.ReplaceAll(key, ".", "/")); err != nil {
			t.Errorf("%s: the kernel has no such setting", key)
			continue
		}
		// Namespaced settings are applied for real in a throwaway network namespace; the
		// neighbour thresholds and conntrack's table size are writable only in the host's, which
		// a test must not change.
		if !strings.HasPrefix(key, "net.") || strings.Contains(key, "gc_thresh") || key == "net.netfilter.nf_conntrack_max" {
			continue
		}
		out, err := node.Exec(ctx, "unshare", "--net", "sh", "-c", "sysctl -q -w "+key+"="+value+" && sysctl -n "+key)
		if err != nil || strings.TrimSpace(out) != value {
			t.Errorf("%s=%s: the kernel did not take it through the image's sysctl: %q %v", key, value, out, err)
		}
	}
}

// hasLineWithFields reports whether some line of out has every word as one of its fields.
func hasLineWithFields(out string, words ...string) bool {
	for _, line := range strings.Split(out, "\n") {
		f := strings.Fields(line)
		ok := true
		for _, w := range words {
			found := false
			for _, x := range f {
				found = found || x == w
			}
			ok = ok && found
		}
		if ok {
			return true
		}
	}
	return false
}
