package node

import (
	"context"
	"fmt"
	"os"

	"github.com/clusterforge/clusterforge/components/machine"
	"github.com/clusterforge/clusterforge/components/wellknown"
)

// preloadImages puts every preload_image into containerd's k8s.io namespace, imported from its
// archive or pulled from its registry, unpacked for the overlayfs snapshotter, and checks each
// digest (L25, L26). Then the compressed layers are dropped: once unpacked they are dead weight
// that would double the image and the first boot's copy onto the local disk. containerd runs only
// for this step. Control-plane images have none.
func (b *bake) preloadImages(ctx context.Context) error {
	if len(b.PreloadImages) == 0 {
		return nil
	}
	pid, log := q(b.StagingDir+"/containerd.pid"), q(b.StagingDir+"/containerd.log")
	start := fmt.Sprintf("%s --config %s >%s 2>&1 & echo $! >%s; "+
		"for i in $(seq 100); do [ -S %s ] && exit 0; sleep 0.1; done; echo containerd did not start >&2; cat %s >&2; exit 1",
		q(machine.BinDir+"/containerd"), q(machine.ContainerdConfigPath), log, pid, q(wellknown.ContainerdSocketPath), log)
	if err := b.run(ctx, start); err != nil {
		return err
	}
	// containerd must be gone before the image is captured: its metadata database is written on exit.
	defer func() {
		_ = b.run(context.Background(), fmt.Sprintf(`pid=$(cat %[1]s); kill "$pid"; while kill -0 "$pid" 2>/dev/null; do sleep 0.1; done; rm -f %[1]s`, pid))
	}()
	ctr := fmt.Sprintf("%s --address %s -n k8s.io", q(machine.BinDir+"/ctr"), q(wellknown.ContainerdSocketPath))
	for _, img := range b.PreloadImages {
		if err := b.fetchImage(ctx, ctr, img); err != nil {
			return err
		}
		// The name reaches awk as a variable (-v), never as program text.
		verify := fmt.Sprintf(`got=$(%s images ls | awk -v name=%s '$1 == name {print $3}'); [ "$got" = %s ] || { echo %s "$got" %s >&2; exit 1; }`,
			ctr, q(img.Name), q(img.Digest), q(img.Name+": digest"), q("want "+img.Digest+" (does the archive name the image with io.containerd.image.name?)"))
		if err := b.run(ctx, verify); err != nil {
			return err
		}
		b.manifest.Images = append(b.manifest.Images, manifestImage{Name: img.Name, Digest: img.Digest})
	}
	// Pruning the layers' references lets the garbage collector take them; deleting a throwaway
	// tag with --sync runs it now rather than at some later point containerd might not reach.
	const gcTag = "clusterforge.local/gc:sync"
	return b.run(ctx, fmt.Sprintf("%[1]s content prune references && %[1]s images tag %[2]s %[3]s && %[1]s images rm --sync %[3]s",
		ctr, q(b.PreloadImages[0].Name), q(gcTag)))
}

// fetchImage imports the image's archive (the archive names the image, so its digest is the
// manifest's) or pulls it from its registry.
func (b *bake) fetchImage(ctx context.Context, ctr string, img PreloadImage) error {
	if img.Archive == "" {
		return b.run(ctx, fmt.Sprintf("%s images pull --snapshotter overlayfs %s", ctr, q(img.Name)))
	}
	f, err := os.Open(img.Archive)
	if err != nil {
		return err
	}
	defer f.Close()
	staged := b.StagingDir + "/image.tar"
	if err := b.comm.Upload(staged, f, nil); err != nil {
		return fmt.Errorf("upload %s: %w", img.Archive, err)
	}
	return b.run(ctx, fmt.Sprintf("%s images import --snapshotter overlayfs %s && rm -f %s", ctr, q(staged), q(staged)))
}
