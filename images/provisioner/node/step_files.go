package node

import (
	"context"
	"fmt"
	"strings"

	"github.com/clusterforge/clusterforge/components/machine"
)

// writeFiles installs what the machine package renders for the role's image: for workers
// machine.NodeImage (containerd config, the local-disk unit, sysctls, the cloud-init override),
// for the control plane machine.ControlPlaneImage (the local-disk names, sysctls); and enables
// the image's units.
func (b *bake) writeFiles(ctx context.Context) error {
	if b.GPU {
		check := fmt.Sprintf("test -x %[1]s || { echo %[2]s >&2; exit 1; }", q(machine.NvidiaContainerRuntime),
			q("gpu: "+machine.NvidiaContainerRuntime+" is missing; install the NVIDIA container toolkit before clusterforge-node"))
		if err := b.run(ctx, check); err != nil {
			return err
		}
	}
	image := machine.ControlPlaneImage()
	if b.Role == machine.ImageWorker {
		image = machine.NodeImage(b.cluster, b.GPU)
	}
	for _, f := range append(image.Files, image.UnitFiles()...) {
		if err := b.installString(ctx, f.Content, f.Path, f.Mode); err != nil {
			return err
		}
	}
	var units []string
	for _, u := range image.Units {
		if u.Enable {
			units = append(units, q(u.Name))
		}
	}
	if len(units) == 0 {
		return nil
	}
	return b.run(ctx, "systemctl enable "+strings.Join(units, " "))
}
