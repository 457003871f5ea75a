package publish

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/hashicorp/hcl/v2"
	"github.com/hashicorp/hcl/v2/hclparse"
	"github.com/hashicorp/hcl/v2/hclsyntax"

	"github.com/clusterforge/clusterforge/components/machine"
	"github.com/clusterforge/clusterforge/components/spec"
	"github.com/clusterforge/clusterforge/images/ociimage"
)

const testGallery = "/subscriptions/11111111-2222-3333-4444-555555555555/resourceGroups/images/providers/Microsoft.Compute/galleries/clusterforge"

// template parses role's Packer template.
func template(t *testing.T, role string) (*hclsyntax.Body, string) {
	t.Helper()
	path := ""
	for _, g := range spec.GalleryImages {
		if g.Role == role {
			path = filepath.Join("..", "..", g.Template())
		}
	}
	file, diags := hclparse.NewParser().ParseHCLFile(path)
	if diags.HasErrors() {
		t.Fatal(role, diags)
	}
	return file.Body.(*hclsyntax.Body), filepath.Base(path)
}

// templateVars reads a template's variable blocks: name → whether it has a default.
func templateVars(body *hclsyntax.Body) map[string]bool {
	vars := map[string]bool{}
	for _, block := range body.Blocks {
		if block.Type == "variable" {
			_, hasDefault := block.Body.Attributes["default"]
			vars[block.Labels[0]] = hasDefault
		}
	}
	return vars
}

// Every stack's publish of each role sets every variable its template declares without a
// default, and no variable the template does not declare (Packer only warns of those).
func TestVarsAreTheTemplatesVariables(t *testing.T) {
	stacks, err := filepath.Glob("../../stacks/Pulumi.*.yaml")
	if err != nil || len(stacks) == 0 {
		t.Fatalf("stacks: %v, %d files", err, len(stacks))
	}
	for _, role := range machine.ImageRoles {
		body, file := template(t, role)
		declared := templateVars(body)
		for _, stack := range stacks {
			cluster, err := spec.LoadStack(stack)
			if err != nil {
				t.Fatal(err)
			}
			r := Request{Role: role, StackPath: stack, Cluster: cluster, Version: "2026.12.5", Gallery: testGallery, BinariesDir: "/bin"}
			if role == machine.ImageWorker {
				r.Preload = &ociimage.PreloadVars{PreloadImages: []ociimage.Preload{{Name: cluster.Versions.PauseImage, Digest: spec.DefaultPauseImageDigest}}}
			}
			vars, err := Vars(r)
			if err != nil {
				t.Fatalf("%s %s: %v", role, stack, err)
			}
			for name := range vars {
				if _, ok := declared[name]; !ok {
					t.Errorf("%s %s: sets %s, which %s does not declare", role, filepath.Base(stack), name, file)
				}
			}
			for name, hasDefault := range declared {
				if _, set := vars[name]; !set && !hasDefault {
					t.Errorf("%s %s: leaves %s unset, which %s declares without a default", role, filepath.Base(stack), name, file)
				}
			}
		}
	}
}

// The stack lines name the image definitions each template publishes, read from the template:
// its image_name, for each of the worker's variants (locals.variants' keys).
func TestStackLinesNameTheTemplatesDefinitions(t *testing.T) {
	cluster, err := spec.LoadStack("../../stacks/Pulumi.dev.yaml")
	if err != nil {
		t.Fatal(err)
	}
	for _, role := range machine.ImageRoles {
		body, name := template(t, role)
		var imageName string
		var variants []string
		hclsyntax.VisitAll(body, func(n hclsyntax.Node) hcl.Diagnostics {
			if a, ok := n.(*hclsyntax.Attribute); ok && a.Name == "image_name" {
				imageName = string(a.Expr.Range().SliceBytes(mustRead(t, a.SrcRange.Filename)))
			}
			if b, ok := n.(*hclsyntax.Block); ok && b.Type == "locals" {
				if v, ok := b.Body.Attributes["variants"]; ok {
					for _, item := range v.Expr.(*hclsyntax.ObjectConsExpr).Items {
						key, _ := item.KeyExpr.Value(nil)
						variants = append(variants, key.AsString())
					}
				}
			}
			return nil
		})
		imageName = strings.Trim(imageName, `"`)
		var published []string
		if strings.Contains(imageName, "${source.key}") {
			for _, v := range variants {
				published = append(published, strings.ReplaceAll(imageName, "${source.key}", v))
			}
		} else {
			published = []string{imageName}
		}
		lines, err := StackLines(Request{Role: role, Cluster: cluster, Version: "1.2.3", Gallery: testGallery})
		if err != nil {
			t.Fatal(err)
		}
		var named []string
		for _, l := range lines {
			field, id, _ := strings.Cut(l, ": ")
			r, err := spec.ParseResourceID(id, "Microsoft.Compute", "galleries", "images", "versions")
			if err != nil {
				t.Fatalf("%s: %v", l, err)
			}
			named = append(named, r.Names[1])
			// The line is one the stack takes: set on a copy of the stack, it validates.
			c := *cluster
			i := slices.IndexFunc(spec.GalleryImages, func(g spec.GalleryImage) bool { return g.Field == field })
			if i < 0 {
				t.Fatalf("%s: no stack field %s", l, field)
			}
			*spec.GalleryImages[i].Version(&c) = id
			if err := c.Validate(); err != nil {
				t.Errorf("%s: %v", l, err)
			}
		}
		slices.Sort(published)
		slices.Sort(named)
		if len(published) == 0 || !slices.Equal(published, named) {
			t.Errorf("%s: stack lines name %v, %s publishes %v", role, named, name, published)
		}
	}
}

func mustRead(t *testing.T, path string) []byte {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return data
}

// A publish refuses what would fail late, on Azure: no gallery while the stack boots the
// placeholder, a gallery id or version outside Resource Manager's grammar, a worker without
// its preload list.
func TestVarsRefuse(t *testing.T) {
	cluster, err := spec.LoadStack("../../stacks/Pulumi.dev.yaml")
	if err != nil {
		t.Fatal(err)
	}
	preload := &ociimage.PreloadVars{}
	for name, r := range map[string]Request{
		"placeholder, no gallery": {Role: machine.ImageWorker, Cluster: cluster, Version: "1.0.0", Preload: preload},
		"version not a.b.c":       {Role: machine.ImageWorker, Cluster: cluster, Version: "2026-12-05", Gallery: testGallery, Preload: preload},
		"gallery not an id":       {Role: machine.ImageWorker, Cluster: cluster, Version: "1.0.0", Gallery: "clusterforge", Preload: preload},
		"gallery with a quote":    {Role: machine.ImageControlPlane, Cluster: cluster, Version: "1.0.0", Gallery: testGallery + `"x`},
		"worker, no preload list": {Role: machine.ImageWorker, Cluster: cluster, Version: "1.0.0", Gallery: testGallery},
		"no such role":            {Role: "etcd", Cluster: cluster, Version: "1.0.0", Gallery: testGallery},
	} {
		if _, err := Vars(r); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
}
