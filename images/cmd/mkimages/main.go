// Command mkimages writes the OCI image archives a worker bake preloads, and the Packer variable
// file that lists them: the stack's pause image, the add-on images built from the toolchain's
// pinned sources (addons.BuiltImages: CoreDNS, Prometheus, node_exporter, node-problem-detector,
// clusterforge-ops) and one large multi-layer app image (the role of the seeds' "Dota" image, L26).
// With -push it also pushes the app image to a registry.
//
//	mkimages -pause-binary build/bin/pause -tools .tools -stack stacks/Pulumi.dev.yaml -out build/images/preload
package main

import (
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/remote"

	"github.com/clusterforge/clusterforge/components/addons"
	"github.com/clusterforge/clusterforge/components/spec"
	"github.com/clusterforge/clusterforge/images/ociimage"
)

// preload is one entry of the template's preload_images variable.
type preload struct {
	Name    string `json:"name"`
	Archive string `json:"archive"` // "": pulled from the registry at bake time
	Digest  string `json:"digest"`
}

func main() {
	pauseBinary := flag.String("pause-binary", "", "static pause binary (images/cmd/pause)")
	tools := flag.String("tools", ".tools", "the toolchain's output, holding the add-on binaries (scripts/toolchain.sh addons)")
	stack := flag.String("stack", "stacks/Pulumi.dev.yaml", "stack file whose pause image is preloaded")
	out := flag.String("out", "build/images/preload", "output directory for archives, layers and preload.pkrvars.json")
	appName := flag.String("app-name", "clusterforge.local/training-app:v1", "reference of the large app image")
	layers := flag.Int("app-layers", 4, "data layers of the app image")
	layerMiB := flag.Int64("app-layer-mib", 16, "size of each data layer, MiB")
	push := flag.String("push", "", "also push the app image to this reference (plain HTTP allowed for 127.0.0.1 registries)")
	seed := flag.Uint64("seed", 1, "seed of the app image's data: another seed, another image of the same size")
	fromRegistry := flag.Bool("app-from-registry", false, "with -push: list the app image without an archive, so the bake pulls it from the registry")
	flag.Parse()
	if err := run(*pauseBinary, *tools, *stack, *out, *appName, *layers, *layerMiB<<20, *seed, *push, *fromRegistry); err != nil {
		fmt.Fprintln(os.Stderr, "mkimages:", err)
		os.Exit(1)
	}
}

func run(pauseBinary, tools, stack, out, appName string, layers int, layerBytes int64, seed uint64, push string, fromRegistry bool) error {
	if fromRegistry && push != appName {
		return fmt.Errorf("-app-from-registry: the bake pulls -app-name, so -push must be the same reference (%q, %q)", push, appName)
	}
	if layers < 1 || layerBytes < 1<<20 {
		return fmt.Errorf("-app-layers and -app-layer-mib: at least 1 each (got %d layers of %d MiB)", layers, layerBytes>>20)
	}
	if pauseBinary == "" {
		return fmt.Errorf("-pause-binary: required; build images/cmd/pause with CGO_ENABLED=0")
	}
	cluster, err := spec.LoadStack(stack)
	if err != nil {
		return fmt.Errorf("-stack: %w", err)
	}
	layerDir := filepath.Join(out, "layers")
	start := time.Now()
	fmt.Printf("==> app image: %d layers of %d MiB in %s\n", layers, layerBytes>>20, layerDir)
	app, err := ociimage.Large(layerDir, pauseBinary, layers, layerBytes, seed)
	if err != nil {
		return err
	}
	if push != "" {
		ref, err := name.ParseReference(push, name.Insecure)
		if err != nil {
			return fmt.Errorf("-push: %w", err)
		}
		fmt.Printf("==> pushing %s\n", ref)
		if err := remote.Write(ref, app); err != nil {
			return fmt.Errorf("push %s: %w", ref, err)
		}
	}
	pause, err := ociimage.Pause(layerDir, pauseBinary)
	if err != nil {
		return err
	}
	type archived struct {
		name, file string
		image      v1.Image
	}
	images := []archived{{cluster.Versions.PauseImage, "pause.oci.tar", pause}}
	for _, b := range addons.BuiltImages(cluster) {
		img, err := ociimage.Binary(layerDir, filepath.Join(tools, b.Binary), b.Path)
		if err != nil {
			return fmt.Errorf("add-on image %s: %w (build it: scripts/toolchain.sh addons)", b.Ref, err)
		}
		images = append(images, archived{b.Ref, filepath.Base(b.Binary) + ".oci.tar", img})
	}
	var vars struct {
		PreloadImages []preload `json:"preload_images"`
	}
	for _, img := range append(images, archived{appName, "app.oci.tar", app}) {
		if fromRegistry && img.name == appName {
			digest, err := img.image.Digest()
			if err != nil {
				return err
			}
			fmt.Printf("==> %s %s: the bake pulls it from the registry\n", img.name, digest)
			vars.PreloadImages = append(vars.PreloadImages, preload{Name: img.name, Digest: digest.String()})
			continue
		}
		archive, err := filepath.Abs(filepath.Join(out, img.file))
		if err != nil {
			return err
		}
		digest, err := ociimage.WriteArchive(img.image, img.name, archive)
		if err != nil {
			return err
		}
		fmt.Printf("==> %s %s → %s\n", img.name, digest, archive)
		vars.PreloadImages = append(vars.PreloadImages, preload{Name: img.name, Archive: archive, Digest: digest})
	}
	data, err := json.MarshalIndent(vars, "", "  ")
	if err != nil {
		return err
	}
	fmt.Printf("==> archives written in %.1f s\n", time.Since(start).Seconds())
	return os.WriteFile(filepath.Join(out, "preload.pkrvars.json"), append(data, '\n'), 0o644)
}
