// Command testapp adds the test environment's large app image to a worker bake's preload list:
// layers of seeded random data (incompressible, so the pull benchmark moves what it says) under
// the pause binary as entrypoint, standing in for the big training images a real fleet preloads
// (the seeds' "Dota" image, L26). Local bakes preload it (scripts/image.sh local, after
// images/cmd/mkimages); a published image never carries it.
//
//	testapp -pause-binary build/bin/pause -vars build/images/node-dev.preload/preload.pkrvars.json
package main

import (
	"archive/tar"
	"flag"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/remote"

	"github.com/clusterforge/clusterforge/images/ociimage"
)

func main() {
	pauseBinary := flag.String("pause-binary", "", "static pause binary (images/cmd/pause): the image's entrypoint")
	vars := flag.String("vars", "", "the preload list mkimages wrote (preload.pkrvars.json); the app image is appended, its archive written beside it")
	appName := flag.String("name", "clusterforge.local/training-app:v1", "reference of the app image")
	layers := flag.Int("layers", 4, "data layers")
	layerMiB := flag.Int64("layer-mib", 16, "size of each data layer, MiB")
	seed := flag.Uint64("seed", 1, "seed of the data: another seed, another image of the same size")
	push := flag.String("push", "", "also push the image to this reference (plain HTTP allowed for 127.0.0.1 registries)")
	fromRegistry := flag.Bool("from-registry", false, "with -push: list the image without an archive, so the bake pulls it from the registry")
	flag.Parse()
	if err := run(*pauseBinary, *vars, *appName, *layers, *layerMiB<<20, *seed, *push, *fromRegistry); err != nil {
		fmt.Fprintln(os.Stderr, "testapp:", err)
		os.Exit(1)
	}
}

func run(pauseBinary, varsPath, appName string, layers int, layerBytes int64, seed uint64, push string, fromRegistry bool) error {
	if fromRegistry && push != appName {
		return fmt.Errorf("-from-registry: the bake pulls -name, so -push must be the same reference (%q, %q)", push, appName)
	}
	if layers < 1 || layerBytes < 1<<20 {
		return fmt.Errorf("-layers and -layer-mib: at least 1 each (got %d layers of %d MiB)", layers, layerBytes>>20)
	}
	if pauseBinary == "" || varsPath == "" {
		return fmt.Errorf("-pause-binary and -vars: required")
	}
	vars, err := ociimage.ReadPreloadVars(varsPath)
	if err != nil {
		return err
	}
	out := filepath.Dir(varsPath)
	layerDir := filepath.Join(out, "layers")
	fmt.Printf("==> app image: %d layers of %d MiB in %s\n", layers, layerBytes>>20, layerDir)
	app, err := large(layerDir, pauseBinary, layers, layerBytes, seed)
	if err != nil {
		return err
	}
	entry := ociimage.Preload{Name: appName}
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
	if fromRegistry {
		digest, err := app.Digest()
		if err != nil {
			return err
		}
		entry.Digest = digest.String()
		fmt.Printf("==> %s %s: the bake pulls it from the registry\n", appName, entry.Digest)
	} else {
		if entry.Archive, err = filepath.Abs(filepath.Join(out, "app.oci.tar")); err != nil {
			return err
		}
		if entry.Digest, err = ociimage.WriteArchive(app, appName, entry.Archive); err != nil {
			return err
		}
		fmt.Printf("==> %s %s → %s\n", appName, entry.Digest, entry.Archive)
	}
	vars.PreloadImages = append(vars.PreloadImages, entry)
	return ociimage.WritePreloadVars(varsPath, vars)
}

// large is an image of layers data layers of layerBytes random bytes each (seeded, so the same
// arguments give the same digests), topped by the pause binary as its entrypoint. Layer files
// are written to dir, which later runs reuse.
func large(dir, binary string, layers int, layerBytes int64, seed uint64) (v1.Image, error) {
	var all []v1.Layer
	for i := range layers {
		name := fmt.Sprintf("data-%d-%d-%d", seed, layerBytes, i)
		var key [32]byte
		copy(key[:], fmt.Sprintf("clusterforge-%d-%d", seed, i))
		layer, err := ociimage.CachedLayer(filepath.Join(dir, name+".tar.gz"), func(tw *tar.Writer) error {
			return ociimage.WriteTarFile(tw, "data/"+name, 0o644, layerBytes, rand.NewChaCha8(key))
		})
		if err != nil {
			return nil, err
		}
		all = append(all, layer)
	}
	top, err := ociimage.BinaryLayer(dir, binary, ociimage.PauseEntrypoint)
	if err != nil {
		return nil, err
	}
	return ociimage.Image(append(all, top), ociimage.PauseEntrypoint)
}
