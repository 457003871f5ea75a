package node

import (
	"context"
	"fmt"
	"strings"

	"github.com/clusterforge/clusterforge/components/machine"
	"github.com/clusterforge/clusterforge/components/spec"
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
		if err := b.configureNvidiaRuntime(ctx); err != nil {
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

// configureNvidiaRuntime checks the toolkit is the pinned release, then sets its config so that a
// container sees only the GPUs the device plugin gave it.
func (b *bake) configureNvidiaRuntime(ctx context.Context) error {
	want := "NVIDIA Container Toolkit CLI version " + strings.TrimPrefix(spec.NvidiaContainerToolkitVersion, "v")
	check := fmt.Sprintf("%s --version | grep -Fqx %s || { echo %s >&2; exit 1; }", q(machine.NvidiaCTK), q(want),
		q("gpu: the NVIDIA container toolkit is not "+spec.NvidiaContainerToolkitVersion+" (images/worker.pkr.hcl installs it)"))
	if err := b.run(ctx, check); err != nil {
		return err
	}
	var args []string
	for _, a := range machine.NvidiaCTKConfig(machine.NvidiaRuntimeConfig) {
		args = append(args, q(a))
	}
	return b.run(ctx, strings.Join(args, " "))
}
