//go:generate go tool packer-sdc mapstructure-to-hcl2 -type Config,PreloadImage

// Package node is the clusterforge-node provisioner: over any communicator it installs the pinned
// binaries of its role's image (worker: the runtime and kubelet; control-plane: etcd and the
// control plane), the files the machine package renders for that image, on workers the preloaded
// images verified by digest, and a manifest of what was baked; then it sysprepes the machine.
package node

import (
	"fmt"
	"maps"
	"os"
	"path"
	"path/filepath"
	"regexp"
	"slices"

	"github.com/hashicorp/packer-plugin-sdk/common"
	packersdk "github.com/hashicorp/packer-plugin-sdk/packer"
	"github.com/hashicorp/packer-plugin-sdk/template/config"
	"github.com/hashicorp/packer-plugin-sdk/template/interpolate"

	"github.com/clusterforge/clusterforge/components/machine"
	"github.com/clusterforge/clusterforge/components/spec"
)

// Config is the provisioner's configuration.
type Config struct {
	common.PackerConfig `mapstructure:",squash"`

	// Role is the image baked: "worker" (VMSS worker pools) or "control-plane" (the etcd and
	// apiserver machines). Default "worker".
	Role string `mapstructure:"role"`
	// Stack is the path of the stack file (stacks/Pulumi.<env>.yaml) whose versions and runtime
	// settings the image carries. Required.
	Stack string `mapstructure:"stack" required:"true"`
	// BinariesDir is a local directory holding the pinned binaries of the role's image
	// (machine.ImageBinaries): for workers containerd, containerd-shim-runc-v2, ctr, runc, crictl,
	// kubelet, kube-proxy, clusterforge-node-join and a cni/ folder of CNI plugins; for the control plane etcd, etcdctl, etcdutl,
	// kube-apiserver, kube-controller-manager, kube-scheduler, kubectl, clusterforge-etcd-backup and
	// clusterforge-csr-approver. Required; `scripts/toolchain.sh` builds it.
	BinariesDir string `mapstructure:"binaries_dir" required:"true"`
	// PreloadImages are images baked into containerd's k8s.io namespace, from OCI image archives or
	// pulled from their registries, and checked by digest at bake time (L25, L26). Workers only,
	// where the pause image of the stack must be among them; the control plane runs no containers.
	PreloadImages []PreloadImage `mapstructure:"preload_image"`
	// GPU bakes a GPU worker image: containerd's default runtime becomes NVIDIA's
	// (/usr/bin/nvidia-container-runtime), which must be installed before this provisioner runs.
	// Default false.
	GPU bool `mapstructure:"gpu"`
	// StagingDir is where uploads wait on the machine before they are installed: an absolute path of
	// letters, digits, '.', '_' and '-'. Default "/var/tmp/clusterforge".
	StagingDir string `mapstructure:"staging_dir"`
	// UseSudo runs every command through `sudo -n`, for communicators that log in as a regular
	// user (SSH on Azure). Default false (the chroot communicator is root).
	UseSudo bool `mapstructure:"use_sudo"`
	// ManifestOutput is the local file the bake manifest (versions, image digests) is written to,
	// the build's artifact. Default "clusterforge-manifest.json".
	ManifestOutput string `mapstructure:"manifest_output"`
	// VersionTags are the tags the template gives the gallery image version (azure_tags): when
	// set, they must be what this bake installs (machine.ImageTags of the stack), so an image's
	// tags never claim releases it does not carry. A local bake publishes nothing and sets none.
	VersionTags map[string]string `mapstructure:"version_tags"`

	cluster *spec.Cluster
	ctx     interpolate.Context
}

// PreloadImage is one image baked into the node.
type PreloadImage struct {
	// Name is the image reference pods use, registry/path:tag, e.g. the stack's pause image. Required.
	Name string `mapstructure:"name" required:"true"`
	// Archive is the local OCI image archive whose index names the image with the
	// io.containerd.image.name annotation, as `ctr images export` and images/cmd/mkimages write
	// them. Default "": the machine pulls Name from its registry at bake time.
	Archive string `mapstructure:"archive"`
	// Digest is the image's manifest digest, sha256:<64 hex>, checked after import. Required.
	Digest string `mapstructure:"digest" required:"true"`
}

var (
	digest = regexp.MustCompile(`^sha256:[0-9a-f]{64}$`)
	// stagingDir is an absolute path of plain names: it reaches remote commands (quoted as well).
	stagingDir = regexp.MustCompile(`^(/[A-Za-z0-9._-]+)+$`)
)

// Prepare decodes and validates the configuration; every error names its option.
func (c *Config) Prepare(raws ...interface{}) error {
	err := config.Decode(c, &config.DecodeOpts{
		PluginType: "clusterforge-node", Interpolate: true, InterpolateContext: &c.ctx,
	}, raws...)
	if err != nil {
		return err
	}
	if c.StagingDir == "" {
		c.StagingDir = "/var/tmp/clusterforge"
	}
	if c.ManifestOutput == "" {
		c.ManifestOutput = "clusterforge-manifest.json"
	}
	if c.Role == "" {
		c.Role = machine.ImageWorker
	}
	var errs *packersdk.MultiError
	fail := func(format string, args ...any) { errs = packersdk.MultiErrorAppend(errs, fmt.Errorf(format, args...)) }
	worker := c.Role == machine.ImageWorker
	if !slices.Contains(machine.ImageRoles, c.Role) {
		fail("role: %q is not an image role; use one of %v", c.Role, machine.ImageRoles)
	} else if !worker {
		if len(c.PreloadImages) > 0 {
			fail("preload_image: the %s image runs no containers; remove the preload_image blocks or bake role = %q", c.Role, machine.ImageWorker)
		}
		if c.GPU {
			fail("gpu: only worker images have a GPU variant; remove gpu or bake role = %q", machine.ImageWorker)
		}
	}
	if !stagingDir.MatchString(c.StagingDir) || path.Clean(c.StagingDir) != c.StagingDir {
		fail("staging_dir: %q is not an absolute path of letters, digits, '.', '_' and '-'; use e.g. /var/tmp/clusterforge", c.StagingDir)
	}
	if c.Stack == "" {
		fail("stack: required; give the stack file whose versions the image carries, e.g. stacks/Pulumi.prod-7500.yaml")
	} else if c.cluster, err = spec.LoadStack(c.Stack); err != nil {
		fail("stack: %v", err)
	} else if want := machine.ImageTags(c.cluster.Versions, c.Role); c.VersionTags != nil && !maps.Equal(c.VersionTags, want) {
		fail("version_tags: %v, but a %s image baked for %s carries %v; write the tags `make image-publish` writes", c.VersionTags, c.Role, c.Stack, want)
	}
	if c.BinariesDir == "" {
		fail("binaries_dir: required; build it with scripts/toolchain.sh")
	} else {
		for _, b := range machine.ImageBinaries[c.Role] {
			if _, err := os.Stat(filepath.Join(c.BinariesDir, b)); err != nil {
				fail("binaries_dir: %s has no %s for the %s image; build it with scripts/toolchain.sh", c.BinariesDir, b, c.Role)
			}
		}
	}
	pause := false
	for i, img := range c.PreloadImages {
		field := fmt.Sprintf("preload_image[%d]", i)
		if !spec.ValidImageReference(img.Name) {
			fail("%s.name: %q is not a pinned image reference; write registry/path:tag, the reference pods use", field, img.Name)
		}
		if img.Archive != "" {
			if _, err := os.Stat(img.Archive); err != nil {
				fail("%s.archive: %v", field, err)
			}
		}
		if !digest.MatchString(img.Digest) {
			fail("%s.digest: %q is not sha256:<64 hex>; use the manifest digest the registry reports", field, img.Digest)
		}
		pause = pause || (c.cluster != nil && img.Name == c.cluster.Versions.PauseImage)
	}
	if worker && c.cluster != nil && !pause {
		fail("preload_image: none is the stack's pause image %s; add it so no node pulls it (L25)", c.cluster.Versions.PauseImage)
	}
	if errs != nil && len(errs.Errors) > 0 {
		return errs
	}
	return nil
}
