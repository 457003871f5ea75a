package node

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"regexp"

	"github.com/clusterforge/clusterforge/components/machine"
	"github.com/clusterforge/clusterforge/images/version"
)

// manifest records what an image was baked with; it lives in the image and is the build artifact.
type manifest struct {
	Plugin string `json:"plugin"`
	Role   string `json:"role"`
	// Versions are the releases the image carries (machine.ImageVersions), which a machine's
	// first boot compares with its stack's.
	Versions map[string]string `json:"versions"`
	Images   []manifestImage   `json:"images,omitempty"`
}

type manifestImage struct {
	Name   string `json:"name"`
	Digest string `json:"digest"`
}

// versionReporters are the installed binaries whose --version the manifest records, per image
// role, each with the stack's versions key it must match.
var versionReporters = map[string][]struct{ binary, key string }{
	machine.ImageWorker:       {{"kubelet", "kubelet"}, {"containerd", "containerd"}, {"runc", "runc"}, {"crictl", "crictl"}},
	machine.ImageControlPlane: {{"kube-apiserver", "kubernetes"}, {"etcd", "etcd"}},
}

// release finds the first release number in a binary's --version output ("Kubernetes v1.37.2",
// "etcd Version: 3.7.3", "runc version 1.5.3").
var release = regexp.MustCompile(`\bv?([0-9]+\.[0-9]+\.[0-9]+)\b`)

// writeManifest records what the image holds: the releases it carries, once each binary that can
// report its version has reported the one the stack pins (another fails the bake), and the
// preloaded images' digests.
func (b *bake) writeManifest(ctx context.Context) error {
	v := b.cluster.Versions
	pinned := map[string]string{"kubernetes": v.Kubernetes, "kubelet": v.Kubelet, "containerd": v.Containerd, "runc": v.Runc, "crictl": v.Crictl, "etcd": v.Etcd}
	for _, r := range versionReporters[b.Role] {
		out, err := b.output(ctx, q(machine.BinDir+"/"+r.binary)+" --version")
		if err != nil {
			return err
		}
		m := release.FindStringSubmatch(out)
		if m == nil {
			return fmt.Errorf("%s --version names no release: %q", r.binary, out)
		}
		if got := "v" + m[1]; got != pinned[r.key] {
			return fmt.Errorf("%s reports %s, the stack pins %s %s", r.binary, got, r.key, pinned[r.key])
		}
	}
	m := b.manifest
	m.Plugin, m.Role, m.Versions = version.PluginVersion.FormattedVersion(), b.Role, machine.ImageVersions(v, b.Role)
	data, err := json.MarshalIndent(m, "", "  ")
	if err != nil {
		return err
	}
	if err := b.installString(ctx, string(data)+"\n", machine.ImageManifestPath, 0o644); err != nil {
		return err
	}
	return os.WriteFile(b.ManifestOutput, append(data, '\n'), 0o644)
}
