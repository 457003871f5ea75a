package machine

import (
	"encoding/json"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/clusterforge/clusterforge/components/spec"
	"github.com/clusterforge/clusterforge/components/wellknown"
	"github.com/clusterforge/clusterforge/test/toolchain"
)

// On NVSwitch sizes the real systemd starts NVIDIA's fabric manager with the kubelet, before it;
// other sizes render no drop-in.
func TestFabricManagerComesBeforeTheKubeletOnNVSwitchSizes(t *testing.T) {
	for size, want := range map[string]bool{"Standard_ND96isr_H100_v5": true, "Standard_NC24ads_A100_v4": false, "Standard_D16ds_v5": false} {
		c := testCluster(t)
		c.Pools[0].VMSize = size
		m := renderAll(t, c)[len(c.Roles())-1]
		dir := readableDir(t)
		dropIns := 0
		for _, f := range append(m.UnitFiles(), m.Files...) {
			if rel, ok := strings.CutPrefix(f.Path, UnitDir+"/"); ok {
				if strings.HasPrefix(rel, "kubelet.service.d/") {
					dropIns++
				}
				if err := os.MkdirAll(filepath.Dir(filepath.Join(dir, rel)), 0o755); err != nil {
					t.Fatal(err)
				}
				if err := os.WriteFile(filepath.Join(dir, rel), []byte(f.Content), 0o644); err != nil {
					t.Fatal(err)
				}
			}
		}
		if got := (dropIns == 1); got != want {
			t.Errorf("%s: %d kubelet drop-ins, want the fabric manager's: %v", size, dropIns, want)
		}
		dump := systemdLoad(t, dir, "kubelet.service").dump
		for _, dep := range []string{"Wants", "After"} {
			if got := strings.Contains(dump, "\t"+dep+": "+FabricManagerUnit+" "); got != want {
				t.Errorf("%s: systemd's kubelet.service %s %s: %v, want %v", size, dep, FabricManagerUnit, got, want)
			}
		}
	}
}

// NVIDIA's own runtime hook (the pinned toolkit, built by `make tools`), configured as the GPU bake
// configures it, passes a container only the GPUs the device plugin mounted: a CUDA image's
// NVIDIA_VISIBLE_DEVICES=all with no GPU requested gets none, and "all" cannot widen an allocation;
// the privileged device plugin still sees every GPU.
func TestGPUContainersGetOnlyTheirAllocatedGPUs(t *testing.T) {
	ctk, hook := toolchain.Binary(t, "bin/nvidia-ctk"), toolchain.Binary(t, "bin/nvidia-container-runtime-hook")
	dir := t.TempDir()
	config := filepath.Join(dir, "config.toml")
	run := func(name string, args ...string) {
		t.Helper()
		if out, err := exec.Command(name, args...).CombinedOutput(); err != nil {
			t.Fatalf("%s %s: %v\n%s", name, strings.Join(args, " "), err, out)
		}
	}
	run(ctk, "config", "default", "--output", config) // what the toolkit's package installs
	bake := NvidiaCTKConfig(config)
	if bake[0] != NvidiaCTK {
		t.Fatalf("the bake runs %s, not nvidia-ctk", bake[0])
	}
	run(ctk, bake[1:]...)
	// The hook hands nvidia-container-cli the devices to mount; a stand-in records them.
	cli := filepath.Join(dir, "nvidia-container-cli")
	if err := os.WriteFile(cli, []byte("#!/bin/sh\necho \"$@\" >\"$0.args\"\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	run(ctk, "config", "--config-file", config, "--in-place", "--set", "nvidia-container-cli.path="+cli)

	// devices runs the hook's prestart on a container and returns the --device it passed, or "none".
	devices := func(env []string, privileged bool, allocated ...string) string {
		t.Helper()
		bundle := t.TempDir()
		var mounts []map[string]string
		for _, id := range allocated {
			mounts = append(mounts, map[string]string{"destination": "/var/run/nvidia-container-devices/" + id, "source": "/dev/null", "type": "bind"})
		}
		caps := []string{"CAP_CHOWN"}
		if privileged {
			caps = append(caps, "CAP_SYS_ADMIN") // what the hook takes for privileged
		}
		spec, _ := json.Marshal(map[string]any{"ociVersion": "1.0.2", "root": map[string]string{"path": filepath.Join(bundle, "rootfs")},
			"process": map[string]any{"env": env, "capabilities": map[string][]string{"bounding": caps}}, "mounts": mounts})
		if err := os.WriteFile(filepath.Join(bundle, "config.json"), spec, 0o644); err != nil {
			t.Fatal(err)
		}
		_ = os.Remove(cli + ".args")
		cmd := exec.Command(hook, "-config", config, "prestart")
		cmd.Stdin = strings.NewReader(`{"pid": 1, "bundle": "` + bundle + `"}`)
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("hook: %v\n%s", err, out)
		}
		args, err := os.ReadFile(cli + ".args")
		if os.IsNotExist(err) {
			return "none"
		}
		for _, a := range strings.Fields(string(args)) {
			if d, ok := strings.CutPrefix(a, "--device="); ok {
				return d
			}
		}
		return "none"
	}
	for _, tc := range []struct {
		name       string
		env        []string
		privileged bool
		allocated  []string
		want       string
	}{
		{"a CUDA image, no GPU requested", []string{"NVIDIA_VISIBLE_DEVICES=all"}, false, nil, "none"},
		{"one GPU allocated, the image asking for all", []string{"NVIDIA_VISIBLE_DEVICES=all"}, false, []string{"GPU-0a"}, "GPU-0a"},
		{"two GPUs allocated", []string{"NVIDIA_VISIBLE_DEVICES=/var/run/nvidia-container-devices"}, false, []string{"GPU-0a", "GPU-1b"}, "GPU-0a,GPU-1b"},
		{"the device plugin, privileged", []string{"NVIDIA_VISIBLE_DEVICES=all"}, true, nil, "all"},
	} {
		if got := devices(tc.env, tc.privileged, tc.allocated...); got != tc.want {
			t.Errorf("%s: the hook passed devices %q, want %q", tc.name, got, tc.want)
		}
	}
}

// A pool's scale sets carry, as cluster-autoscaler's node-template tags, every label its nodes get,
// every taint they register with and their GPUs, and an InfiniBand scale set's own gang domain, in
// the tags' own spelling: '/' as '_', '_' as
// "~2", a taint as "<value>:<effect>" (written out here by hand, not by the encoder).
func TestNodeTemplateTagsDescribeTheNode(t *testing.T) {
	gpu := true
	pool := spec.Pool{Name: "gpu", VMSize: "Standard_ND96isr_H100_v5", GPU: &gpu,
		Labels: map[string]string{"example.com/team_name": "a"},
		Taints: []spec.Taint{{Key: "example.com/dedicated", Effect: "NoSchedule"}}}
	want := map[string]string{
		"k8s.io_cluster-autoscaler_node-template_label_example.com_team~2name":                                  "a",
		"k8s.io_cluster-autoscaler_node-template_label_node-restriction.kubernetes.io_clusterforge-pool":        "gpu",
		"k8s.io_cluster-autoscaler_node-template_label_node-restriction.kubernetes.io_clusterforge-gpu":         "true",
		"k8s.io_cluster-autoscaler_node-template_label_node-restriction.kubernetes.io_clusterforge-gang-domain": "gpu-3",
		"k8s.io_cluster-autoscaler_node-template_taint_example.com_dedicated":                                   ":NoSchedule",
		"k8s.io_cluster-autoscaler_node-template_taint_nvidia.com_gpu":                                          "present:NoSchedule",
		"k8s.io_cluster-autoscaler_node-template_taint_clusterforge.io_preflight":                               "pending:NoSchedule",
		"k8s.io_cluster-autoscaler_node-template_resources_nvidia.com_gpu":                                      "8",
	}
	if got := NodeTemplateTags(spec.ScaleSet{Name: "gpu-3", Pool: pool, SinglePlacementGroup: true}); !maps.Equal(got, want) {
		t.Errorf("node-template tags:\n got %v\nwant %v", got, want)
	}
	for tag, key := range map[string]string{
		"k8s.io_cluster-autoscaler_node-template_label_example.com_team~2name":                           "example.com/team_name",
		"k8s.io_cluster-autoscaler_node-template_label_node-restriction.kubernetes.io_clusterforge-pool": wellknown.PoolLabel,
	} {
		if got, ok := wellknown.TagLabel(tag); !ok || got != key {
			t.Errorf("the label of tag %s: %q, want %q", tag, got, key)
		}
	}
}
