package program

import (
	"fmt"
	"strings"

	"github.com/pulumi/pulumi-azure-native-sdk/compute/v2"
	azurenative "github.com/pulumi/pulumi-azure-native-sdk/v2"
	"github.com/pulumi/pulumi/sdk/v3/go/pulumi"

	"github.com/clusterforge/clusterforge/components/machine"
	"github.com/clusterforge/clusterforge/components/spec"
)

// imagesCarryTheVersions refuses a stack whose gallery images were baked with other releases than
// its versions pin, naming the field, the image and each release: the bake tags every image
// version with what it installed (machine.ImageTags). Each image is read in its own subscription
// (a gallery is often shared from another), with the deploying identity's Reader on it. The
// offline placeholders are `make plan`'s and have no tags.
func imagesCarryTheVersions(ctx *pulumi.Context, c *spec.Cluster) error {
	providers := map[string]pulumi.ProviderResource{}
	read := map[string]map[string]string{}
	for _, im := range machine.StackImages(c) {
		if spec.IsPlaceholderImage(im.ID) {
			continue
		}
		key := strings.ToLower(im.ID)
		tags, ok := read[key]
		if !ok {
			r, err := spec.ParseResourceID(im.ID, "Microsoft.Compute", "galleries", "images", "versions")
			if err != nil {
				return &spec.FieldError{Field: im.Field, Problem: err.Error()}
			}
			sub := strings.ToLower(r.Subscription)
			if providers[sub] == nil {
				p, err := azurenative.NewProvider(ctx, "gallery-"+sub, &azurenative.ProviderArgs{SubscriptionId: pulumi.String(r.Subscription)})
				if err != nil {
					return err
				}
				providers[sub] = p
			}
			version, err := compute.LookupGalleryImageVersion(ctx, &compute.LookupGalleryImageVersionArgs{ResourceGroupName: r.ResourceGroup,
				GalleryName: r.Names[0], GalleryImageName: r.Names[1], GalleryImageVersionName: r.Names[2]}, pulumi.Provider(providers[sub]))
			if err != nil {
				return fmt.Errorf("%s: reading the tags of image %s: %w", im.Field, im.ID, err)
			}
			tags = version.Tags
			read[key] = tags
		}
		if err := machine.ImageRefusal(im, c.Versions, tags); err != nil {
			return err
		}
	}
	return nil
}
