// Command mkimages writes what a worker bake preloads, and the Packer variable file that lists it
// (preload.pkrvars.json): the stack's pause image, pulled at bake time and checked against the
// digest versions.yaml pins, and the add-on images built from the toolchain's
// pinned sources (addons.BuiltImages: CoreDNS, Prometheus, node_exporter, node-problem-detector,
// clusterforge-ops) as OCI archives. `make image-publish` runs it so.
//
// The test environment reaches no registry: -pause-binary makes the pause image from a static
// binary under the stack's name (its digest is ours), and images/testenv/testapp adds its large
// app image to the list.
//
//	mkimages -tools .tools -stack stacks/Pulumi.prod-2500.yaml -out build/images/publish-worker-prod-2500-2026.12.5/preload
package main

import (
	"flag"
	"fmt"
	"os"
	"path"
	"path/filepath"
	"strings"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"

	"github.com/clusterforge/clusterforge/components/addons"
	"github.com/clusterforge/clusterforge/components/spec"
	"github.com/clusterforge/clusterforge/images/ociimage"
)

func main() {
	pauseBinary := flag.String("pause-binary", "", "test environment only: make the pause image from this static binary (images/cmd/pause) instead of pulling the upstream one by digest")
	tools := flag.String("tools", ".tools", "the toolchain's output, holding the add-on binaries (scripts/toolchain.sh addons)")
	stack := flag.String("stack", "stacks/Pulumi.dev.yaml", "stack file whose pause image and add-ons are preloaded")
	out := flag.String("out", "build/images/preload", "output directory for archives, layers and preload.pkrvars.json")
	flag.Parse()
	if err := run(*pauseBinary, *tools, *stack, *out); err != nil {
		fmt.Fprintln(os.Stderr, "mkimages:", err)
		os.Exit(1)
	}
}

func run(pauseBinary, tools, stack, out string) error {
	cluster, err := spec.LoadStack(stack)
	if err != nil {
		return fmt.Errorf("-stack: %w", err)
	}
	layerDir := filepath.Join(out, "layers")
	start := time.Now()
	var vars ociimage.PreloadVars
	archive := func(name, file string, img v1.Image) error {
		path, err := filepath.Abs(filepath.Join(out, file))
		if err != nil {
			return err
		}
		digest, err := ociimage.WriteArchive(img, name, path)
		if err != nil {
			return err
		}
		fmt.Printf("==> %s %s → %s\n", name, digest, path)
		vars.PreloadImages = append(vars.PreloadImages, ociimage.Preload{Name: name, Archive: path, Digest: digest})
		return nil
	}
	if pauseBinary != "" {
		pause, err := ociimage.Pause(layerDir, pauseBinary)
		if err != nil {
			return err
		}
		if err := archive(cluster.Versions.PauseImage, "pause.oci.tar", pause); err != nil {
			return err
		}
	} else {
		digest, err := pauseDigest(cluster.Versions.PauseImage)
		if err != nil {
			return err
		}
		fmt.Printf("==> %s %s: the bake pulls it from its registry\n", cluster.Versions.PauseImage, digest)
		vars.PreloadImages = append(vars.PreloadImages, ociimage.Preload{Name: cluster.Versions.PauseImage, Digest: digest})
	}
	for _, b := range addons.BuiltImages(cluster) {
		img, err := ociimage.Binary(layerDir, filepath.Join(tools, b.Binary), b.Path)
		if err != nil {
			return fmt.Errorf("add-on image %s: %w (build it: scripts/toolchain.sh addons)", b.Ref, err)
		}
		if err := archive(b.Ref, filepath.Base(b.Binary)+".oci.tar", img); err != nil {
			return err
		}
	}
	fmt.Printf("==> archives written in %.1f s\n", time.Since(start).Seconds())
	return ociimage.WritePreloadVars(filepath.Join(out, ociimage.PreloadVarsFile), vars)
}

// pauseDigest is the digest a bake checks the pulled pause image against: versions.yaml's, for its
// pause image or a mirror's copy of it (same repository name and tag: a mirror keeps the digest).
// Another pause image is refused, since no digest is pinned for it.
func pauseDigest(ref string) (string, error) {
	if ref == spec.DefaultPauseImage || strings.HasSuffix(ref, "/"+path.Base(spec.DefaultPauseImage)) {
		return spec.DefaultPauseImageDigest, nil
	}
	return "", fmt.Errorf("versions.pauseImage: %s is neither %s nor a mirror of it (.../%s), the one pause image whose digest versions.yaml pins; publish with the pinned one",
		ref, spec.DefaultPauseImage, path.Base(spec.DefaultPauseImage))
}
