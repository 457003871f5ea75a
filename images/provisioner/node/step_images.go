package node

import (
	"context"
	"fmt"
	"os"

	"github.com/clusterforge/clusterforge/components/machine"
)

// preloadImages imports every preload_image into containerd's k8s.io namespace, unpacked for the
// overlayfs snapshotter without the compressed layers, and checks each digest (L25, L26).
// containerd runs only for the import.
func (b *bake) preloadImages(ctx context.Context) error {
	pid := b.StagingDir + "/containerd.pid"
	start := fmt.Sprintf("%s/containerd --config %s >%s/containerd.log 2>&1 & echo $! >%s; "+
		"for i in $(seq 100); do [ -S %s ] && exit 0; sleep 0.1; done; echo containerd did not start >&2; cat %s/containerd.log >&2; exit 1",
		machine.BinDir, machine.ContainerdConfigPath, b.StagingDir, pid, machine.ContainerdSocketPath, b.StagingDir)
	if err := b.run(ctx, start); err != nil {
		return err
	}
	// containerd must be gone before the image is captured: its metadata database is written on exit.
	defer func() {
		_ = b.run(context.Background(), fmt.Sprintf("pid=$(cat %[1]s); kill $pid; while kill -0 $pid 2>/dev/null; do sleep 0.1; done; rm -f %[1]s", pid))
	}()
	ctr := fmt.Sprintf("%s/ctr --address %s -n k8s.io", machine.BinDir, machine.ContainerdSocketPath)
	for _, img := range b.PreloadImages {
		f, err := os.Open(img.Archive)
		if err != nil {
			return err
		}
		staged := b.StagingDir + "/image.tar"
		err = b.comm.Upload(staged, f, nil)
		f.Close()
		if err != nil {
			return fmt.Errorf("upload %s: %w", img.Archive, err)
		}
		// The archive names the image (io.containerd.image.name), so its digest is the manifest's.
		// Once unpacked, the compressed layers are dead weight: discarding them halves the image
		// and the first boot's copy onto the local disk.
		import_ := fmt.Sprintf("%s images import --snapshotter overlayfs --discard-unpacked-layers %s && rm -f %s", ctr, staged, staged)
		if err := b.run(ctx, import_); err != nil {
			return err
		}
		verify := fmt.Sprintf(`got=$(%s images ls | awk '$1 == "%s" {print $3}'); [ "$got" = "%s" ] || { echo "%s: digest '$got', want %s (does the archive name the image with io.containerd.image.name?)" >&2; exit 1; }`,
			ctr, img.Name, img.Digest, img.Name, img.Digest)
		if err := b.run(ctx, verify); err != nil {
			return err
		}
		b.manifest.Images = append(b.manifest.Images, manifestImage{Name: img.Name, Digest: img.Digest})
	}
	// Discarded layers go at containerd's next garbage collection, which might not come before it
	// stops; deleting a throwaway tag with --sync runs one now.
	const gcTag = "clusterforge.local/gc:sync"
	return b.run(ctx, fmt.Sprintf("%[1]s images tag %[2]s %[3]s && %[1]s images rm --sync %[3]s", ctr, b.PreloadImages[0].Name, gcTag))
}
