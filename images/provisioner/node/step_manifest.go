package node

import (
	"context"
	"encoding/json"
	"os"

	"github.com/clusterforge/clusterforge/components/machine"
	"github.com/clusterforge/clusterforge/images/version"
)

// manifest records what an image was baked with; it lives in the image and is the build artifact.
type manifest struct {
	Plugin     string `json:"plugin"`
	Role       string `json:"role"`
	Kubernetes string `json:"kubernetes"`
	// Worker images.
	Containerd string          `json:"containerd,omitempty"`
	Runc       string          `json:"runc,omitempty"`
	Crictl     string          `json:"crictl,omitempty"`
	AzureCNI   string          `json:"azureCNI,omitempty"`
	PauseImage string          `json:"pauseImage,omitempty"`
	Images     []manifestImage `json:"images,omitempty"`
	// Control-plane images.
	Etcd             string `json:"etcd,omitempty"`
	SchedulerPlugins string `json:"schedulerPlugins,omitempty"`
}

type manifestImage struct {
	Name   string `json:"name"`
	Digest string `json:"digest"`
}

func (b *bake) writeManifest(ctx context.Context) error {
	v := b.cluster.Versions
	m := b.manifest
	m.Plugin, m.Role, m.Kubernetes = version.PluginVersion.FormattedVersion(), b.Role, v.Kubernetes
	if b.Role == machine.ImageWorker {
		m.Containerd, m.Runc, m.Crictl, m.AzureCNI, m.PauseImage = v.Containerd, v.Runc, v.Crictl, v.AzureCNI, v.PauseImage
	} else {
		m.Etcd, m.SchedulerPlugins = v.Etcd, v.SchedulerPlugins
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
