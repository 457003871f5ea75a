package program

import (
	"strings"

	"github.com/pulumi/pulumi-azure-native-sdk/compute/v2"
	azurenative "github.com/pulumi/pulumi-azure-native-sdk/v2"
	"github.com/pulumi/pulumi/sdk/v3/go/pulumi"

	"github.com/clusterforge/clusterforge/components/machine"
	"github.com/clusterforge/clusterforge/components/spec"
)

// imagesCarryTheVersions refuses a stack whose gallery images were baked with other releases than
// its versions pin (machine.CheckImages), by the tags the bake gave each image version. Each image
// is read in its own subscription (a gallery is often shared from another), with the deploying
// identity's Reader on it.
func imagesCarryTheVersions(ctx *pulumi.Context, c *spec.Cluster) error {
	providers := map[string]pulumi.ProviderResource{}
	return machine.CheckImages(c, func(id string) (map[string]string, error) {
		r, err := spec.ParseResourceID(id, "Microsoft.Compute", "galleries", "images", "versions")
		if err != nil {
			return nil, err
		}
		sub := strings.ToLower(r.Subscription)
		if providers[sub] == nil {
			p, err := azurenative.NewProvider(ctx, "gallery-"+sub, &azurenative.ProviderArgs{SubscriptionId: pulumi.String(r.Subscription)})
			if err != nil {
				return nil, err
			}
			providers[sub] = p
		}
		version, err := compute.LookupGalleryImageVersion(ctx, &compute.LookupGalleryImageVersionArgs{ResourceGroupName: r.ResourceGroup,
			GalleryName: r.Names[0], GalleryImageName: r.Names[1], GalleryImageVersionName: r.Names[2]}, pulumi.Provider(providers[sub]))
		if err != nil {
			return nil, err
		}
		return version.Tags, nil
	})
}
