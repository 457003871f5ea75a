package publish

import (
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/hashicorp/hcl/v2/hclparse"
	"github.com/hashicorp/hcl/v2/hclsyntax"

	"github.com/clusterforge/clusterforge/components/machine"
	"github.com/clusterforge/clusterforge/components/spec"
	"github.com/clusterforge/clusterforge/images/ociimage"
)

const testGallery = "/subscriptions/11111111-2222-3333-4444-555555555555/resourceGroups/images/providers/Microsoft.Compute/galleries/clusterforge"

// templateVars reads a template's variable blocks: name → whether it has a default.
func templateVars(t *testing.T, template string) map[string]bool {
	t.Helper()
	file, diags := hclparse.NewParser().ParseHCLFile(filepath.Join("..", template))
	if diags.HasErrors() {
		t.Fatal(diags)
	}
	vars := map[string]bool{}
	for _, block := range file.Body.(*hclsyntax.Body).Blocks {
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
		declared := templateVars(t, Templates[role])
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
					t.Errorf("%s %s: sets %s, which %s does not declare", role, filepath.Base(stack), name, Templates[role])
				}
			}
			for name, hasDefault := range declared {
				if _, set := vars[name]; !set && !hasDefault {
					t.Errorf("%s %s: leaves %s unset, which %s declares without a default", role, filepath.Base(stack), name, Templates[role])
				}
			}
		}
	}
}

// The stack lines name the image definitions each template publishes, read from the template:
// its image_name, for each of the worker's variants.
func TestStackLinesNameTheTemplatesDefinitions(t *testing.T) {
	imageName := regexp.MustCompile(`(?m)^\s*image_name\s*=\s*"([^"]+)"`)
	variant := regexp.MustCompile(`(?m)^\s*(\w+)\s*=\s*"Standard_`)
	cluster, err := spec.LoadStack("../../stacks/Pulumi.dev.yaml")
	if err != nil {
		t.Fatal(err)
	}
	for _, role := range machine.ImageRoles {
		data, err := os.ReadFile(filepath.Join("..", Templates[role]))
		if err != nil {
			t.Fatal(err)
		}
		m := imageName.FindSubmatch(data)
		if m == nil {
			t.Fatalf("%s: no image_name", Templates[role])
		}
		var published []string
		for _, v := range variant.FindAllSubmatch(data, -1) {
			published = append(published, strings.ReplaceAll(string(m[1]), "${source.key}", string(v[1])))
		}
		if !strings.Contains(string(m[1]), "${") {
			published = []string{string(m[1])}
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
			switch field {
			case "image":
				c.Image = id
			case "gpuImage":
				c.GPUImage = id
			case "controlPlaneImage":
				c.ControlPlaneImage = id
			default:
				t.Errorf("%s: no stack field %s", l, field)
			}
			if err := c.Validate(); err != nil {
				t.Errorf("%s: %v", l, err)
			}
		}
		slices.Sort(published)
		slices.Sort(named)
		if !slices.Equal(published, named) {
			t.Errorf("%s: stack lines name %v, the template publishes %v", role, named, published)
		}
	}
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
