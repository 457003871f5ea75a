package offline

import (
	"maps"
	"strings"
	"testing"

	"github.com/clusterforge/clusterforge/components/machine"
	"github.com/clusterforge/clusterforge/components/spec"
	"github.com/clusterforge/clusterforge/infra/program"
)

// The program reads the tags of every gallery image the stack names, in the image's own
// subscription, and refuses a stack pinning other releases than an image was baked with, naming
// the field, the image and the release; an image without the tags is refused too.
func TestImagesCarryTheStacksVersions(t *testing.T) {
	const gallery = "/subscriptions/11111111-2222-3333-4444-555555555555/resourceGroups/images/providers/Microsoft.Compute/galleries/fleet/images/"
	controlPlane, cpu, gpu := gallery+"control-plane/versions/1.0.0", gallery+"worker-cpu/versions/1.0.0", gallery+"worker-gpu/versions/1.0.0"
	path, _ := editedDev(t, "    name: cf-dev\n", "    name: cf-dev\n    controlPlaneImage: "+controlPlane+"\n    image: "+cpu+"\n    gpuImage: "+gpu+"\n")
	c, err := spec.LoadStack(path)
	if err != nil {
		t.Fatal(err)
	}
	baked := func() Gallery {
		return Gallery{controlPlane: machine.ImageTags(c.Versions, machine.ImageControlPlane),
			cpu: machine.ImageTags(c.Versions, machine.ImageWorker), gpu: machine.ImageTags(c.Versions, machine.ImageWorker)}
	}
	for _, tc := range []struct {
		name   string
		change func(Gallery)
		refuse []string // what the refusal names; none: planned
	}{
		{"every image baked for the stack", func(Gallery) {}, nil},
		{"a worker image with another containerd", func(g Gallery) {
			g[cpu] = maps.Clone(g[cpu])
			g[cpu]["versions.containerd"] = "v2.0.0"
		}, []string{"pools[0].image", cpu, "versions.containerd: the stack pins " + c.Versions.Containerd + ", the image was baked with v2.0.0"}},
		{"a control-plane image of the previous release", func(g Gallery) {
			g[controlPlane] = machine.ImageTags(spec.Versions{Kubernetes: spec.PreviousKubernetesVersion, Etcd: c.Versions.Etcd}, machine.ImageControlPlane)
		}, []string{"controlPlaneImage", controlPlane, "versions.kubernetes: the stack pins " + c.Versions.Kubernetes}},
		{"an image without the tags", func(g Gallery) { g[gpu] = map[string]string{} }, []string{gpu, "versions.kubelet", "no such tag"}},
		{"an image the gallery does not hold", func(g Gallery) { delete(g, gpu) }, []string{gpu, "ResourceNotFound"}},
	} {
		g := baked()
		tc.change(g)
		_, err := run("edited", path, nil, program.Previous{}, g)
		switch {
		case tc.refuse == nil && err != nil:
			t.Errorf("%s: %v", tc.name, err)
		case tc.refuse != nil && err == nil:
			t.Errorf("%s: planned; want it refused", tc.name)
		case tc.refuse != nil:
			for _, s := range tc.refuse {
				if !strings.Contains(err.Error(), s) {
					t.Errorf("%s: %v; want it to name %q", tc.name, err, s)
				}
			}
		}
	}
}
