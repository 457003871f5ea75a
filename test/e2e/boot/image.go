package boot

import (
	"bufio"
	"context"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/clusterforge/clusterforge/components/machine"
	"github.com/clusterforge/clusterforge/components/wellknown"
	"github.com/clusterforge/clusterforge/test/containerdcfg"
	"github.com/clusterforge/clusterforge/test/e2e/framework"
)

// A booted worker's containerd serves every image the bake preloaded, by the digest the bake was
// given, from the local disk containerd-disk.service formatted and seeded (L22, L25, L26), with
// the compressed layers discarded, and runs with the settings the image renders.
func WorkerImageServesPreloadedImagesFromTheLocalDisk(t *testing.T) {
	framework.NeedBoot(t)
	node, want := framework.FirstWorker(t), framework.PreloadList(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	ctr := []string{machine.BinDir + "/ctr", "--address", wellknown.ContainerdSocketPath, "-n", "k8s.io"}

	listing, err := framework.Booted.Exec(ctx, node, append(ctr, "images", "ls")...)
	if err != nil {
		t.Fatalf("containerd on %s does not answer: %v", node, err)
	}
	got := map[string]string{} // name → digest
	for _, line := range strings.Split(listing, "\n")[1:] {
		if f := strings.Fields(line); len(f) > 2 {
			got[f[0]] = f[2]
		}
	}
	for _, img := range want {
		if got[img.Name] != img.Digest {
			t.Errorf("%s: containerd has digest %q, the bake was given %s", img.Name, got[img.Name], img.Digest)
		}
	}
	if pause := framework.Booted.Cluster.Versions.PauseImage; got[pause] == "" {
		t.Errorf("the stack's pause image %s is not preloaded (L25):\n%s", pause, listing)
	}

	// Every image is unpacked for the overlayfs snapshotter; its compressed layers were discarded.
	check, err := framework.Booted.Exec(ctx, node, append(ctr, "images", "check")...)
	if err != nil {
		t.Fatal(err)
	}
	for _, img := range want {
		if !hasLineWithFields(check, img.Name, "true") {
			t.Errorf("%s is not unpacked:\n%s", img.Name, check)
		}
	}
	blobs, err := framework.Booted.Exec(ctx, node, "du", "-sb", machine.ContainerdRoot+"/io.containerd.content.v1.content/blobs")
	if err != nil {
		t.Fatal(err)
	}
	// The app the pod test runs may have been pulled since only if it was not preloaded: that
	// test fails then. A few KiB of index blobs stay.
	f := strings.Fields(blobs)
	size, err := strconv.Atoi(append(f, "")[0])
	if err != nil {
		t.Fatalf("du of the content store: %q: %v", blobs, err)
	}
	if size > 1<<20 {
		t.Errorf("the content store holds %d bytes: the compressed layers were not discarded after unpacking", size)
	}

	// containerd's root is the local disk the unit formatted and labelled, not the OS disk.
	mount, err := framework.Booted.Exec(ctx, node, "findmnt", "-n", "-o", "SOURCE,FSTYPE", machine.ContainerdRoot)
	if err != nil {
		t.Fatalf("%s is not a mount point: %v", machine.ContainerdRoot, err)
	}
	f = strings.Fields(mount)
	if len(f) < 2 || f[1] != "ext4" {
		t.Fatalf("%s is mounted as %q; want the local disk, ext4", machine.ContainerdRoot, mount)
	}
	label, err := framework.Booted.Exec(ctx, node, "blkid", "-s", "LABEL", "-o", "value", f[0])
	if err != nil || strings.TrimSpace(label) != machine.ContainerdDiskLabel {
		t.Errorf("%s (%s) is labelled %q (%v); want %s, the label containerd-disk.service gives the local disk", machine.ContainerdRoot, f[0], strings.TrimSpace(label), err, machine.ContainerdDiskLabel)
	}

	// The config containerd actually runs with.
	dump, err := framework.Booted.Exec(ctx, node, machine.BinDir+"/containerd", "--config", machine.ContainerdConfigPath, "config", "dump")
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range containerdcfg.Settings(framework.Booted.Cluster, false) {
		if !strings.Contains(dump, want) {
			t.Errorf("the worker's containerd runs without %s", want)
		}
	}
	// Nothing in the config sends containerd back to an older path or format on start.
	warnings, err := framework.Booted.Exec(ctx, node, "journalctl", "-u", strings.TrimSuffix(machine.ContainerdUnit, ".service"), "-p", "warning", "--no-pager", "-o", "cat")
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(warnings, "\n") {
		if strings.Contains(line, "Falling back") || strings.Contains(line, "migrated") || strings.Contains(line, "deprecated") && !strings.Contains(line, "cgroup v1") {
			t.Errorf("the worker's containerd warns on start: %s", line)
		}
	}
}

// The sysctls the worker image carries: the L27 neighbour-table thresholds, each key one the
// kernel knows, and the namespaced ones accepted by the kernel through the image's own sysctl.
func WorkerImageSysctls(t *testing.T) {
	framework.NeedBoot(t)
	node := framework.FirstWorker(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	data, err := framework.Booted.Exec(ctx, node, "cat", machine.SysctlPath)
	if err != nil {
		t.Fatal(err)
	}
	values := map[string]string{}
	sc := bufio.NewScanner(strings.NewReader(data))
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
		// a test must not change (deviation "kernel").
		if !strings.HasPrefix(key, "net.") || strings.Contains(key, "gc_thresh") || key == "net.netfilter.nf_conntrack_max" {
			continue
		}
		out, err := framework.Booted.Exec(ctx, node, "unshare", "--net", "sh", "-c", "sysctl -q -w "+key+"="+value+" && sysctl -n "+key)
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
