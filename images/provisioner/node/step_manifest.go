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
// Versions are what the installed binaries report where they can.
type manifest struct {
	Plugin string `json:"plugin"`
	Role   string `json:"role"`
	// Kubernetes is the control plane's on a control-plane image, the kubelet's on a worker's.
	Kubernetes string `json:"kubernetes"`
	// Worker images.
	Containerd string          `json:"containerd,omitempty"`
	Runc       string          `json:"runc,omitempty"`
	Crictl     string          `json:"crictl,omitempty"`
	AzureCNI   string          `json:"azureCNI,omitempty"`
	PauseImage string          `json:"pauseImage,omitempty"`
	Images     []manifestImage `json:"images,omitempty"`
	// Control-plane images.
	Etcd string `json:"etcd,omitempty"`
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

// writeManifest records what the image holds: each installed binary's version as the binary
// itself reports it (a binary that reports another release than the stack pins fails the bake),
// the versions the stack pins for what cannot report (the CNI plugins, the pause image), and the
// preloaded images' digests.
func (b *bake) writeManifest(ctx context.Context) error {
	v := b.cluster.Versions
	pinned := map[string]string{"kubernetes": v.Kubernetes, "kubelet": v.Kubelet, "containerd": v.Containerd, "runc": v.Runc, "crictl": v.Crictl, "etcd": v.Etcd}
	reported := map[string]string{}
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
		reported[r.key] = "v" + m[1]
	}
	m := b.manifest
	m.Plugin, m.Role, m.Kubernetes = version.PluginVersion.FormattedVersion(), b.Role, reported["kubernetes"]
	if b.Role == machine.ImageWorker {
		m.Kubernetes = reported["kubelet"] // a worker image's Kubernetes is its kubelet's
		m.Containerd, m.Runc, m.Crictl, m.AzureCNI, m.PauseImage = reported["containerd"], reported["runc"], reported["crictl"], v.AzureCNI, v.PauseImage
	} else {
		m.Etcd = reported["etcd"]
	}
	data, err := json.MarshalIndent(m, "", "  ")
	if err != nil {
		return err
	}
	if err := b.installString(ctx, string(data)+"\n", machine.ImageManifestPath, 0o644); err != nil {
		return err
	}
	return os.WriteFile(b.ManifestOutput, append(data, '\n'), 0o644)
}
