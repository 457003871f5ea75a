package rollazure

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/clusterforge/clusterforge/components/machine"
	"github.com/clusterforge/clusterforge/components/spec"
	"github.com/clusterforge/clusterforge/test/standin/arm"
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

// forge reads an image's tags from Resource Manager as the deploying identity, in the gallery's
// resource group: the stand-in answers as Azure does, and refuses a caller without read on it.
func TestGalleryTagsFromResourceManager(t *testing.T) {
	c, err := spec.LoadStack("../../stacks/Pulumi.dev.yaml")
	if err != nil {
		t.Fatal(err)
	}
	const subscription = "11111111-2222-3333-4444-555555555555"
	const gallery = "/subscriptions/" + subscription + "/resourceGroups/images/providers/Microsoft.Compute/galleries/fleet/images/"
	c.ControlPlaneImage = gallery + "control-plane/versions/1.0.0"
	for i := range c.Pools {
		c.Pools[i].Image = gallery + "worker-cpu/versions/1.0.0"
	}
	srv := &arm.Server{Subscription: subscription, ResourceGroup: "cf-dev", Location: "eastus2", GalleryImages: map[string]map[string]string{
		c.ControlPlaneImage: machine.ImageTags(c.Versions, machine.ImageControlPlane),
		c.Pools[0].Image:    machine.ImageTags(c.Versions, machine.ImageWorker),
	}}
	local := arm.Serve(t, srv, "22222222-2222-2222-2222-222222222222")
	const deployer, stranger = "11111111-1111-1111-1111-0000000000de", "11111111-1111-1111-1111-0000000000st"
	local.Grant(deployer, "/subscriptions/"+subscription+"/resourceGroups/images/providers/Microsoft.Compute/galleries/fleet", "Microsoft.Compute/galleries/images/versions/read")
	if err := checkImages(context.Background(), c, galleryTags(local.Credential(deployer), local.Options())); err != nil {
		t.Errorf("the deployer, images baked for the stack: %v", err)
	}
	c.Versions.Containerd = "v2.0.0"
	if err := checkImages(context.Background(), c, galleryTags(local.Credential(deployer), local.Options())); err == nil || !strings.Contains(err.Error(), "versions.containerd: the stack pins v2.0.0") {
		t.Errorf("a stack pinning another containerd: %v; want it refused, naming the field", err)
	}
	if err := checkImages(context.Background(), c, galleryTags(local.Credential(stranger), local.Options())); err == nil || !strings.Contains(err.Error(), "403") {
		t.Errorf("a caller without read on the gallery: %v; want Resource Manager's refusal", err)
	}
}
