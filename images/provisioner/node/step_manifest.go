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
	Plugin     string          `json:"plugin"`
	Kubernetes string          `json:"kubernetes"`
	Containerd string          `json:"containerd"`
	Runc       string          `json:"runc"`
	Crictl     string          `json:"crictl"`
	AzureCNI   string          `json:"azureCNI"`
	PauseImage string          `json:"pauseImage"`
	Images     []manifestImage `json:"images"`
}

type manifestImage struct {
	Name   string `json:"name"`
	Digest string `json:"digest"`
}

func (b *bake) writeManifest(ctx context.Context) error {
	v := b.cluster.Versions
	m := b.manifest
	m.Plugin, m.Kubernetes, m.Containerd, m.Runc, m.Crictl, m.AzureCNI, m.PauseImage =
		version.PluginVersion.FormattedVersion(), v.Kubernetes, v.Containerd, v.Runc, v.Crictl, v.AzureCNI, v.PauseImage
	data, err := json.MarshalIndent(m, "", "  ")
	if err != nil {
		return err
	}
	if err := b.installString(ctx, string(data)+"\n", machine.ImageManifestPath, 0o644); err != nil {
		return err
	}
	return os.WriteFile(b.ManifestOutput, append(data, '\n'), 0o644)
}
