// Package publish writes what `packer build` of images/<role>.pkr.hcl needs to publish a stack's
// image into an Azure Compute Gallery (`make image-publish`): the template's variables, from the
// stack and the gallery, and the stack lines that then boot the new version.
package publish

import (
	"fmt"
	"strings"

	"github.com/clusterforge/clusterforge/components/machine"
	"github.com/clusterforge/clusterforge/components/spec"
	"github.com/clusterforge/clusterforge/images/ociimage"
)

// Request is one publish of a role's image for a stack.
type Request struct {
	Role      string
	StackPath string // the stack file, absolute: the template reads it from images/
	Cluster   *spec.Cluster
	// Version is the gallery image version to create, Major.Minor.Patch.
	Version string
	// Gallery is the gallery's resource id; "" takes the gallery of the image the stack boots for
	// Role now, unless that is the offline placeholder.
	Gallery string
	// BinariesDir holds the role's pinned binaries (machine.ImageBinaries).
	BinariesDir string
	// Preload is what a worker image preloads (images/cmd/mkimages); nil for the control plane.
	Preload *ociimage.PreloadVars
}

// Vars are the template's variables for r, as a Packer JSON variable file holds them.
func Vars(r Request) (map[string]any, error) {
	if len(r.images()) == 0 {
		return nil, fmt.Errorf("no image role %q; roles: %v", r.Role, machine.ImageRoles)
	}
	if (r.Role == machine.ImageWorker) != (r.Preload != nil) {
		return nil, fmt.Errorf("a worker image takes a preload list, a control-plane image none")
	}
	gallery, err := r.gallery()
	if err != nil {
		return nil, err
	}
	for _, g := range r.images() {
		if _, err := spec.ParseResourceID(versionID(gallery, g.Definition, r.Version), "Microsoft.Compute", "galleries", "images", "versions"); err != nil {
			return nil, fmt.Errorf("IMAGE_VERSION %s: %w", spec.Excerpt(r.Version), err)
		}
	}
	id, _ := spec.ParseResourceID(gallery, "Microsoft.Compute", "galleries")
	vars := map[string]any{
		"stack":                  r.StackPath,
		"binaries_dir":           r.BinariesDir,
		"subscription_id":        id.Subscription,
		"location":               r.Cluster.Location,
		"gallery_resource_group": id.ResourceGroup,
		"gallery_name":           id.Names[0],
		"image_version":          r.Version,
		"replication_regions":    []string{r.Cluster.Location},
		"version_tags":           machine.ImageTags(r.Cluster.Versions, r.Role),
	}
	if r.Preload != nil {
		vars["preload_images"] = r.Preload.PreloadImages
	}
	return vars, nil
}

// StackLines are the lines of the stack file that boot the published version.
func StackLines(r Request) ([]string, error) {
	gallery, err := r.gallery()
	if err != nil {
		return nil, err
	}
	var lines []string
	for _, g := range r.images() {
		lines = append(lines, fmt.Sprintf("%s: %s", g.Field, versionID(gallery, g.Definition, r.Version)))
	}
	return lines, nil
}

// images are the image definitions a publish of the role creates a version of.
func (r Request) images() []spec.GalleryImage {
	var out []spec.GalleryImage
	for _, g := range spec.GalleryImages {
		if g.Role == r.Role {
			out = append(out, g)
		}
	}
	return out
}

// gallery is the gallery's id, checked against Resource Manager's grammar.
func (r Request) gallery() (string, error) {
	g := r.Gallery
	if g == "" {
		images := r.images()
		if len(images) == 0 {
			return "", fmt.Errorf("no image role %q; roles: %v", r.Role, machine.ImageRoles)
		}
		current := *images[0].Version(r.Cluster)
		if spec.IsPlaceholderImage(current) {
			return "", fmt.Errorf("GALLERY: the stack boots the offline placeholder image, so name the gallery to publish into (/subscriptions/<guid>/resourceGroups/<rg>/providers/Microsoft.Compute/galleries/<name>)")
		}
		// A version id's gallery is what precedes its image definition.
		def := spec.ImageDefinition(current)
		g = def[:strings.LastIndex(strings.ToLower(def), "/images/")]
	}
	if _, err := spec.ParseResourceID(g, "Microsoft.Compute", "galleries"); err != nil {
		return "", fmt.Errorf("GALLERY %s: %w", spec.Excerpt(g), err)
	}
	return g, nil
}

func versionID(gallery, definition, version string) string {
	return gallery + "/images/" + definition + "/versions/" + version
}
