package rehearsal_test

import (
	"context"
	"flag"
	"fmt"
	"testing"
	"time"

	"github.com/clusterforge/clusterforge/components/machine"
	"github.com/clusterforge/clusterforge/components/rehearsal"
)

// scripts/bench-pull.sh sets these: a large image in a local registry, and a node image with the
// same image baked in.
var (
	pullImage      = flag.String("pull-image", "", "large image the pull benchmark pulls from a local registry")
	preloadedImage = flag.String("preloaded-image", "", "node image tarball with -pull-image baked in")
)

// BenchmarkImageReady is the time from a fresh node's first boot unit until a large image is
// usable (pulled and unpacked, or found in the store), three ways: pulled with containerd's
// defaults, pulled with the settings the image renders (L20-L24), and preloaded (L26), where the
// time includes seeding the local disk with the baked images. Run by scripts/bench-pull.sh.
func BenchmarkImageReady(b *testing.B) {
	if *pullImage == "" || *preloadedImage == "" {
		b.Skip("needs -pull-image and -preloaded-image: run scripts/bench-pull.sh")
	}
	defaults := func(ctx context.Context, n *rehearsal.BakedNode) error {
		if err := n.Start(ctx, "containerd-disk.service"); err != nil {
			return err
		}
		// An empty config: containerd's own defaults (3 concurrent downloads).
		return n.Run(ctx, "containerd", false, machine.BinDir+"/containerd", "--config", "/dev/null")
	}
	ours := func(ctx context.Context, n *rehearsal.BakedNode) error {
		return n.Start(ctx, "containerd-disk.service", "containerd.service")
	}
	for _, mode := range []struct {
		name  string
		image string
		boot  func(context.Context, *rehearsal.BakedNode) error
		pull  bool
	}{
		{"pull-containerd-defaults", "", defaults, true},
		{"pull-clusterforge-settings", "", ours, true},
		{"preloaded", *preloadedImage, ours, false},
	} {
		b.Run(mode.name, func(b *testing.B) {
			for i := range b.N {
				b.StopTimer()
				var node *rehearsal.BakedNode
				if mode.image == "" {
					node, _ = bootBakedNode(b, fmt.Sprintf("bench-%s-%d", mode.name, i))
				} else {
					node, _ = bootImage(b, mode.image, fmt.Sprintf("bench-%s-%d", mode.name, i))
				}
				ctx, cancel := context.WithTimeout(context.Background(), 30*time.Minute)
				b.StartTimer()
				if err := mode.boot(ctx, node); err != nil {
					b.Fatal(err)
				}
				if err := imageUsable(ctx, node, *pullImage, mode.pull); err != nil {
					b.Fatal(err)
				}
				b.StopTimer()
				cancel()
				if mode.pull {
					reportPulled(b, node)
				}
				if err := node.Shutdown(); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// imageUsable waits for the CRI to answer, then pulls ref (as the kubelet would) or waits until
// the CRI finds it in the store.
func imageUsable(ctx context.Context, n *rehearsal.BakedNode, ref string, pull bool) error {
	crictl := []string{machine.BinDir + "/crictl"}
	if err := pollUntil(time.Minute, func() error { _, err := n.Exec(ctx, append(crictl, "info")...); return err }); err != nil {
		return fmt.Errorf("the CRI does not answer: %w", err)
	}
	if pull {
		_, err := n.Exec(ctx, append(crictl, "pull", ref)...)
		return err
	}
	return pollUntil(time.Minute, func() error { _, err := n.Exec(ctx, append(crictl, "inspecti", ref)...); return err })
}

// reportPulled records the bytes the pull wrote to the node's content store.
func reportPulled(b *testing.B, n *rehearsal.BakedNode) {
	out, err := n.Exec(context.Background(), "du", "-sb", machine.ContainerdRoot+"/io.containerd.content.v1.content/blobs")
	var bytes float64
	if _, scanErr := fmt.Sscan(out, &bytes); err != nil || scanErr != nil {
		b.Fatalf("content store size: %v %v", err, scanErr)
	}
	b.ReportMetric(bytes/(1<<20), "MiB-in-store")
}
