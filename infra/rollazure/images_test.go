package rollazure

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/clusterforge/clusterforge/components/machine"
	"github.com/clusterforge/clusterforge/components/spec"
)

// forge diff, roll and grow refuse a stack pinning other releases than its images were baked
// with, naming the field, the image and the release, before they touch anything.
func TestDiffAndRollRefuseImagesOfOtherReleases(t *testing.T) {
	c, err := spec.LoadStack("../../stacks/Pulumi.dev.yaml")
	if err != nil {
		t.Fatal(err)
	}
	const gallery = "/subscriptions/11111111-2222-3333-4444-555555555555/resourceGroups/images/providers/Microsoft.Compute/galleries/fleet/images/"
	c.ControlPlaneImage = gallery + "control-plane/versions/1.0.0"
	for i := range c.Pools {
		c.Pools[i].Image = gallery + "worker-cpu/versions/1.0.0"
	}
	baked := map[string]map[string]string{
		c.ControlPlaneImage: machine.ImageTags(c.Versions, machine.ImageControlPlane),
		c.Pools[0].Image:    machine.ImageTags(c.Versions, machine.ImageWorker),
	}
	read := func(tags map[string]map[string]string) imageTags {
		return func(_ context.Context, id string) (map[string]string, error) {
			if t, ok := tags[id]; ok {
				return t, nil
			}
			return nil, errors.New("ResourceNotFound")
		}
	}
	if err := checkImages(context.Background(), c, read(baked)); err != nil {
		t.Errorf("images baked for the stack: %v", err)
	}
	other := map[string]map[string]string{c.ControlPlaneImage: baked[c.ControlPlaneImage], c.Pools[0].Image: machine.ImageTags(spec.Versions{
		Kubelet: spec.PreviousKubernetesVersion, Containerd: c.Versions.Containerd, Runc: c.Versions.Runc, Crictl: c.Versions.Crictl,
		AzureCNI: c.Versions.AzureCNI, PauseImage: c.Versions.PauseImage}, machine.ImageWorker)}
	err = checkImages(context.Background(), c, read(other))
	for _, want := range []string{"pools[0].image", c.Pools[0].Image, "versions.kubelet: the stack pins " + c.Versions.Kubelet + ", the image was baked with " + spec.PreviousKubernetesVersion} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("a worker image of the previous kubelet: %v; want it refused, naming %q", err, want)
		}
	}
	if err := checkImages(context.Background(), c, read(nil)); err == nil || !strings.Contains(err.Error(), "controlPlaneImage: reading the tags of image") {
		t.Errorf("an image the gallery does not hold: %v; want it refused, naming the field", err)
	}
}
