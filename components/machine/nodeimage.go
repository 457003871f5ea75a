package machine

import (
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/clusterforge/clusterforge/components/spec"
	"github.com/clusterforge/clusterforge/components/wellknown"
)

// Files the Packer plugin (images/) bakes into every worker image. They depend on the stack's
// versions and runtime settings, not on a machine's identity.
const (
	ContainerdConfigPath = "/etc/containerd/config.toml"
	ContainerdRoot       = "/var/lib/containerd"
	SysctlPath           = "/etc/sysctl.d/90-clusterforge.conf"
	CrictlConfigPath     = "/etc/crictl.yaml"
	ModulesPath          = "/etc/modules-load.d/clusterforge.conf"
	// AzureCNICloudInitPath keeps cloud-init from configuring the NIC's secondary IPs, which Azure
	// CNI hands to pods (L29).
	AzureCNICloudInitPath = "/etc/cloud/cloud.cfg.d/95-clusterforge-azure-cni.cfg"
	CNIBinDir             = "/opt/cni/bin"
	CNIConfDir            = "/etc/cni/net.d"
	// ImageManifestPath records what the image was baked with (versions, image digests).
	ImageManifestPath = "/etc/clusterforge/image-manifest.json"
	// ContainerdDiskLabel marks a local disk containerd-disk.service has formatted and seeded.
	ContainerdDiskLabel = "containerd-data"
)

// The image's units, in boot order: the local disk is mounted as containerd's root, then
// containerd starts.
const (
	ContainerdDiskUnit = "containerd-disk.service"
	ContainerdUnit     = "containerd.service"
)

// NvidiaContainerRuntime is the runc wrapper of NVIDIA's container toolkit, which GPU images
// install before the provisioner runs (worker.pkr.hcl).
const NvidiaContainerRuntime = "/usr/bin/nvidia-container-runtime"

// The toolkit's CLI and the config its runtime and runtime hook read.
const (
	NvidiaCTK           = "/usr/bin/nvidia-ctk"
	NvidiaRuntimeConfig = "/etc/nvidia-container-runtime/config.toml"
)

// NvidiaDeviceListStrategy is how the device plugin passes a container its GPUs: as /dev/null
// mounts under /var/run/nvidia-container-devices, which only a pod with host paths (none at the
// baseline Pod Security level) could forge.
const NvidiaDeviceListStrategy = "volume-mounts"

// NvidiaCTKConfig is the command line that makes the toolkit's config at path take an
// unprivileged container's GPUs only from the device plugin's mounts. At the toolkit's defaults
// its NVIDIA_VISIBLE_DEVICES, which CUDA images set to "all", reaches every GPU of its node with
// none requested. Privileged containers (the device plugin) still get what the variable names.
// The runtime stays in legacy mode (the prestart hook, which a test runs), not the release's
// just-in-time CDI default; since v1.18.0 its other device modifiers (InfiniBand, NVSwitch, GDS,
// graphics) also act only on devices the container may have.
func NvidiaCTKConfig(path string) []string {
	return []string{NvidiaCTK, "config", "--config-file", path, "--in-place",
		"--set", "accept-nvidia-visible-devices-envvar-when-unprivileged=false",
		"--set", "accept-nvidia-visible-devices-as-volume-mounts=true",
		"--set", "nvidia-container-runtime.mode=legacy"}
}

// ContainerdRuntimeSection is the table of containerd's config that holds the CRI runtime's own
// settings.
const ContainerdRuntimeSection = `[plugins."io.containerd.cri.v1.runtime"]`

// ContainerdConfig is containerd's config in the format of the pinned containerd 2.3 (version 4,
// its own: an older one is migrated, with a warning, on every start). On GPU images the default
// runtime is NVIDIA's runc wrapper, which injects the driver and devices into GPU containers.
func ContainerdConfig(c *spec.Cluster, gpu bool) string {
	timeout, _ := time.ParseDuration(c.Kubelet.ImagePullProgressTimeout) // validated
	runtime, binary := "runc", BinDir+"/runc"
	if gpu {
		runtime, binary = "nvidia", NvidiaContainerRuntime
	}
	return fmt.Sprintf(`version = 4
# The root is on the local SSD, mounted by %[1]s before containerd starts (L22).
root = %[2]s
state = %[3]s

[plugins."io.containerd.server.v1.grpc"]
  address = %[4]s

[plugins."io.containerd.cri.v1.images"]
  snapshotter = "overlayfs" # L21: the devicemapper and btrfs snapshotters were the slow path
  # A stalled pull is cancelled, a slow one is not (L23).
  image_pull_progress_timeout = %[7]s
  [plugins."io.containerd.cri.v1.images".pinned_images]
    # Pinned and preloaded: a fresh node pulls nothing to start its first pod (L25).
    sandbox = %[5]s

# Pulls go through the transfer service, which takes the download limit (the CRI's own would put
# pulls back on the older path): layers download in parallel (L24), this many on the node at once.
[plugins."io.containerd.transfer.v1.local"]
  max_concurrent_downloads = %[6]d

%[13]s
  # No CDI devices, no checkpoints: the device plugin mounts GPUs (NvidiaDeviceListStrategy) and
  # nothing here restores a container, so neither is left for a pod to reach.
  enable_cdi = false
  enable_criu = false
  [%[14]s.containerd]
    default_runtime_name = %[11]s
    [%[14]s.containerd.runtimes.%[12]s]
      runtime_type = "io.containerd.runc.v2"
      [%[14]s.containerd.runtimes.%[12]s.options]
        BinaryName = %[8]s
        SystemdCgroup = true

  [%[14]s.cni]
    bin_dirs = [%[9]s]
    conf_dir = %[10]s

# No NRI plugins run here.
[plugins."io.containerd.nri.v1.nri"]
  disable = true
`, ContainerdDiskUnit, tomlString(ContainerdRoot), tomlString(wellknown.ContainerdState), tomlString(wellknown.ContainerdSocketPath),
		tomlString(c.Versions.PauseImage), c.Kubelet.MaxConcurrentDownloads, tomlString(timeout.String()), tomlString(binary),
		tomlString(CNIBinDir), tomlString(CNIConfDir), tomlString(runtime), runtime, ContainerdRuntimeSection,
		strings.Trim(ContainerdRuntimeSection, "[]"))
}

// Sysctls are the node kernel settings, each with its reason.
var Sysctls = `# clusterforge worker sysctls: one reason each.
# Thousands of pod IPs per subnet overflow the default neighbour table: ARP lookups fail (L27).
net.ipv4.neigh.default.gc_thresh1 = 80000
net.ipv4.neigh.default.gc_thresh2 = 90000
net.ipv4.neigh.default.gc_thresh3 = 100000
# Pods' traffic is routed through the node.
net.ipv4.ip_forward = 1
# kube-proxy leaves conntrack's table size to this (conntrack.maxPerCore 0): one entry per flow
# through a Service or NAT, and data loaders open many.
net.netfilter.nf_conntrack_max = 1048576
# The kubelet runs with protectKernelDefaults and refuses to start unless these hold.
vm.overcommit_memory = 1
vm.panic_on_oom = 0
kernel.panic = 10
kernel.panic_on_oops = 1
kernel.keys.root_maxkeys = 1000000
kernel.keys.root_maxbytes = 25000000
# Training jobs and their sidecars watch many files.
fs.inotify.max_user_watches = 1048576
fs.inotify.max_user_instances = 8192
# Debian's own value, stated: kubelet.podPidsLimit is bounded by it.
kernel.pid_max = ` + strconv.Itoa(spec.MaxPodPids) + `
`

// crictlConfig points crictl, the operator's tool on a node, at containerd.
var crictlConfig = "runtime-endpoint: " + wellknown.ContainerdEndpoint + "\nimage-endpoint: " + wellknown.ContainerdEndpoint + "\n"

// kernelModules are loaded at boot: overlayfs for the snapshotter, nf_conntrack before its sysctl.
const kernelModules = "overlay\nnf_conntrack\n"

const azureCNICloudInit = `# Azure CNI assigns the NIC's secondary IP configurations to pods; cloud-init must not put them on
# the host interface (L29).
datasource:
  Azure:
    apply_network_config: false
`

// containerdUnit is containerd's own service definition, started after its disk is mounted.
var containerdUnit = `[Unit]
Description=containerd container runtime
After=network.target local-fs.target ` + ContainerdDiskUnit + `
Requires=` + ContainerdDiskUnit + `

[Service]
ExecStartPre=-/sbin/modprobe overlay
ExecStart=` + BinDir + `/containerd --config ` + ContainerdConfigPath + `
Type=notify
Delegate=yes
KillMode=process
Restart=always
RestartSec=5
LimitNPROC=infinity
LimitCORE=infinity
LimitNOFILE=1048576
TasksMax=infinity
OOMScoreAdjust=-999

[Install]
WantedBy=multi-user.target
`

// NodeImage is everything a worker image carries besides the binaries and preloaded images: the
// runtime config (for GPU images with NVIDIA's runtime), the local-disk names and mount, kernel
// settings, the cloud-init override and the pod network.
func NodeImage(c *spec.Cluster, gpu bool) Machine {
	m := Machine{Role: "node-image"}
	m.add(azureDiskNames)
	m.add(localDisk(strings.TrimSuffix(ContainerdDiskUnit, ".service"), ContainerdDiskLabel, ContainerdRoot,
		"mount the local SSD as containerd's root, seeded with the baked images (L22)", "Before="+ContainerdUnit))
	m.add(part{
		files: []File{
			{Path: ContainerdConfigPath, Content: ContainerdConfig(c, gpu), Mode: 0o644},
			{Path: SysctlPath, Content: Sysctls, Mode: 0o644},
			{Path: CrictlConfigPath, Content: crictlConfig, Mode: 0o644},
			{Path: ModulesPath, Content: kernelModules, Mode: 0o644},
			{Path: AzureCNICloudInitPath, Content: azureCNICloudInit, Mode: 0o644},
		},
		units: []Unit{{Name: ContainerdUnit, Enable: true, Content: containerdUnit}},
	})
	m.add(podNetwork())
	return m
}

// ImageVersions are the releases an image (ImageWorker or ImageControlPlane) carries, by their
// stack fields (versions.<key>), as the stack pins them: the bake records them in the image's
// manifest after checking that the binaries report them, and a machine's first boot refuses an
// image whose manifest says otherwise.
func ImageVersions(v spec.Versions, image string) map[string]string {
	if image == ImageControlPlane {
		return map[string]string{"kubernetes": v.Kubernetes, "etcd": v.Etcd}
	}
	return map[string]string{"kubelet": v.Kubelet, "containerd": v.Containerd, "runc": v.Runc, "crictl": v.Crictl,
		"azureCNI": v.AzureCNI, "pauseImage": v.PauseImage}
}

// ImageCheckUnit runs before every other clusterforge unit (the identity step requires it).
const ImageCheckUnit = "clusterforge-image-check.service"

// imageCheck refuses to start a machine on an image baked with other releases than the stack
// pins, naming each: the stack's versions and its gallery image are separate fields, and a
// mismatch would otherwise surface as a roll waiting for a kubelet version that never comes.
func imageCheck(c *spec.Cluster, image string) part {
	path := LibexecDir + "/image-check"
	return part{
		files: []File{{Path: path, Content: ImageCheckScript(c.Versions, image), Mode: 0o755}},
		units: []Unit{bootStep(ImageCheckUnit, "refuse an image baked with other releases than the stack pins", "", path)},
	}
}

// ImageCheckScript is the first-boot check of an image's manifest (its path the first argument,
// ImageManifestPath without) against ImageVersions: it exits non-zero naming each release that
// differs.
func ImageCheckScript(v spec.Versions, image string) string {
	versions := ImageVersions(v, image)
	var checks strings.Builder
	for _, key := range slices.Sorted(maps.Keys(versions)) {
		fmt.Fprintf(&checks, "check %s %s\n", key, ShellQuote(versions[key]))
	}
	return `#!/bin/sh
# Refuses an image whose manifest names other releases than this machine's stack pins.
set -u
manifest=${1:-` + ImageManifestPath + `}
if [ ! -r "$manifest" ]; then
  echo "clusterforge-image-check: $manifest is missing: this is not a clusterforge image" >&2
  exit 1
fi
status=0
check() {
  grep -qF "\"$1\": \"$2\"" "$manifest" && return
  echo "clusterforge-image-check: the stack pins versions.$1 $2, the image was baked with $(grep -o "\"$1\": \"[^\"]*\"" "$manifest" || echo none): boot an image baked for this stack, or pin what the image carries" >&2
  status=1
}
` + checks.String() + `exit $status
`
}

// ImageTagPrefix begins the tags of a gallery image version that name the releases it carries:
// each tag is the stack field (versions.<field>), its value the release, for each of ImageVersions.
const ImageTagPrefix = "versions."

// ImageTags are the tags the bake gives a gallery image version of image for a stack pinning v.
func ImageTags(v spec.Versions, image string) map[string]string {
	tags := map[string]string{}
	for field, release := range ImageVersions(v, image) {
		tags[ImageTagPrefix+field] = release
	}
	return tags
}

// ImageMismatches names each release a gallery image version's tags give otherwise than a stack
// pinning v would have baked, one line a field; an image without the tags is no bake of ours.
func ImageMismatches(v spec.Versions, image string, tags map[string]string) []string {
	var out []string
	want := ImageTags(v, image)
	for _, field := range slices.Sorted(maps.Keys(want)) {
		switch got, ok := tags[field]; {
		case !ok:
			out = append(out, fmt.Sprintf("%s: the stack pins %s, the image has no such tag", field, want[field]))
		case got != want[field]:
			out = append(out, fmt.Sprintf("%s: the stack pins %s, the image was baked with %s", field, want[field], got))
		}
	}
	return out
}

// StackImage is a gallery image version a stack boots: the field that names it, its id and which
// image (ImageWorker, ImageControlPlane) it must be.
type StackImage struct {
	Field, ID, Image string
}

// StackImages are the gallery image versions the stack's machines boot, in field order.
func StackImages(c *spec.Cluster) []StackImage {
	out := []StackImage{{Field: "controlPlaneImage", ID: c.ControlPlaneImage, Image: ImageControlPlane}}
	for i, p := range c.Pools {
		out = append(out, StackImage{Field: fmt.Sprintf("pools[%d].image", i), ID: p.Image, Image: ImageWorker})
	}
	return out
}

// ImageRefusal is the refusal of a stack whose image im was baked with other releases than the
// stack's versions, by the tags of im's gallery image version; nil when they agree.
func ImageRefusal(im StackImage, v spec.Versions, tags map[string]string) error {
	bad := ImageMismatches(v, im.Image, tags)
	if len(bad) == 0 {
		return nil
	}
	return &spec.FieldError{Field: im.Field,
		Problem: fmt.Sprintf("names image %s, baked with other releases than the stack's versions: %s", im.ID, strings.Join(bad, "; ")),
		Fix:     "publish an image baked for this stack, or pin the releases the image carries"}
}

// CheckImages refuses a stack whose gallery images were baked with other releases than its
// versions pin (ImageRefusal), reading each image's tags once with read; `make plan`'s
// placeholders have none and are skipped (`pulumi up` refuses them).
func CheckImages(c *spec.Cluster, read func(id string) (map[string]string, error)) error {
	tagsOf := map[string]map[string]string{}
	for _, im := range StackImages(c) {
		if spec.IsPlaceholderImage(im.ID) {
			continue
		}
		key := strings.ToLower(im.ID)
		tags, ok := tagsOf[key]
		if !ok {
			var err error
			if tags, err = read(im.ID); err != nil {
				return fmt.Errorf("%s: reading the tags of image %s: %w", im.Field, im.ID, err)
			}
			tagsOf[key] = tags
		}
		if err := ImageRefusal(im, c.Versions, tags); err != nil {
			return err
		}
	}
	return nil
}
