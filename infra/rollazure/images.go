package rollazure

import (
	"context"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore"
	"github.com/Azure/azure-sdk-for-go/sdk/azcore/arm"
	"github.com/Azure/azure-sdk-for-go/sdk/resourcemanager/compute/armcompute/v6"

	"github.com/clusterforge/clusterforge/components/machine"
	"github.com/clusterforge/clusterforge/components/spec"
)

// imageTags reads a gallery image version's tags by its id.
type imageTags func(ctx context.Context, id string) (map[string]string, error)

// galleryTags reads them from Resource Manager with cred, in the image's own subscription; options
// name the cloud (nil: Azure's public cloud).
func galleryTags(cred azcore.TokenCredential, options *arm.ClientOptions) imageTags {
	return func(ctx context.Context, id string) (map[string]string, error) {
		r, err := spec.ParseResourceID(id, "Microsoft.Compute", "galleries", "images", "versions")
		if err != nil {
			return nil, err
		}
		client, err := armcompute.NewGalleryImageVersionsClient(r.Subscription, cred, options)
		if err != nil {
			return nil, err
		}
		v, err := client.Get(ctx, r.ResourceGroup, r.Names[0], r.Names[1], r.Names[2], nil)
		if err != nil {
			return nil, err
		}
		tags := map[string]string{}
		for k, v := range v.Tags {
			if v != nil {
				tags[k] = *v
			}
		}
		return tags, nil
	}
}

// checkImages refuses a desired stack whose gallery images were baked with other releases than
// its versions pin, as `pulumi up` does (machine.CheckImages), before a diff or a roll starts.
func checkImages(ctx context.Context, desired *spec.Cluster, read imageTags) error {
	return machine.CheckImages(desired, func(id string) (map[string]string, error) { return read(ctx, id) })
}
