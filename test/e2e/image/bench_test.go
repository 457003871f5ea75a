package image_test

import (
	"context"
	"flag"
	"fmt"
	"io"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/clusterforge/clusterforge/components/machine"
	"github.com/clusterforge/clusterforge/test/drills"
	"github.com/clusterforge/clusterforge/test/rehearsal"
)

// scripts/bench-pull.sh sets these: a large image in a local registry, and a node image with the
// same image baked in.
var (
	pullImage      = flag.String("pull-image", "", "large image the pull benchmark pulls from a local registry (127.0.0.1:PORT/...)")
	preloadedImage = flag.String("preloaded-image", "", "node image tarball with -pull-image baked in")
	connectionMiBs = flag.Int("per-connection-mibps", 64, "the remote-registry model: each connection's throughput, MiB/s")
)

// BenchmarkImageReady is the time from a fresh node's first boot unit until a large image is
// usable (pulled and unpacked, or found in the store): pulled with containerd's defaults, pulled
// with the settings the image renders (L20-L24), and preloaded (L26), where the time includes
// seeding the local disk with the baked images. Pulls run twice: from the registry on loopback,
// and through a proxy that holds each connection to -per-connection-mibps, as a remote registry
// or CDN serves each stream. Run by scripts/bench-pull.sh.
func BenchmarkImageReady(b *testing.B) {
	if *pullImage == "" || *preloadedImage == "" {
		b.Skip("needs -pull-image and -preloaded-image: run scripts/bench-pull.sh")
	}
	registry, repo, _ := strings.Cut(*pullImage, "/")
	proxy, err := throttle(registry, *connectionMiBs<<20)
	if err != nil {
		b.Fatal(err)
	}
	defer proxy.Close()
	defaults := func(ctx context.Context, n *rehearsal.BakedNode) error {
		if err := n.Start(ctx, machine.ContainerdDiskUnit); err != nil {
			return err
		}
		// An empty config: containerd's own defaults (3 concurrent downloads).
		return n.Run(ctx, "containerd", false, machine.BinDir+"/containerd", "--config", "/dev/null")
	}
	ours := func(ctx context.Context, n *rehearsal.BakedNode) error {
		return n.Start(ctx, machine.ContainerdDiskUnit, machine.ContainerdUnit)
	}
	type mode struct {
		name, image, ref string
		boot             func(context.Context, *rehearsal.BakedNode) error
		pull             bool
	}
	var modes []mode
	for _, network := range []struct{ name, ref string }{
		{"loopback", *pullImage},
		{fmt.Sprintf("%dMiBps-per-connection", *connectionMiBs), proxy.Addr().String() + "/" + repo},
	} {
		modes = append(modes,
			mode{network.name + "/pull-containerd-defaults", "", network.ref, defaults, true},
			mode{network.name + "/pull-clusterforge-settings", "", network.ref, ours, true})
	}
	modes = append(modes, mode{"preloaded", *preloadedImage, *pullImage, ours, false})
	for _, m := range modes {
		b.Run(m.name, func(b *testing.B) {
			for i := range b.N {
				b.StopTimer()
				var node *rehearsal.BakedNode
				dir := fmt.Sprintf("bench-%s-%d", strings.ReplaceAll(m.name, "/", "-"), i)
				if m.image == "" {
					node, _ = bootBakedNode(b, dir)
				} else {
					node, _ = bootImage(b, m.image, dir)
				}
				ctx, cancel := context.WithTimeout(context.Background(), 30*time.Minute)
				b.StartTimer()
				start := time.Now()
				if err := m.boot(ctx, node); err != nil {
					b.Fatal(err)
				}
				if err := criReady(ctx, node); err != nil {
					b.Fatal(err)
				}
				booted := time.Since(start)
				if err := imageUsable(ctx, node, m.ref, m.pull); err != nil {
					b.Fatal(err)
				}
				b.StopTimer()
				cancel()
				b.ReportMetric(booted.Seconds(), "s-until-CRI")
				if err := node.Shutdown(); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

var crictl = []string{machine.BinDir + "/crictl"}

func criReady(ctx context.Context, n *rehearsal.BakedNode) error {
	err := drills.WaitUntil(time.Minute, func() error { _, err := n.Exec(ctx, append(crictl, "info")...); return err })
	if err != nil {
		return fmt.Errorf("the CRI does not answer: %w", err)
	}
	return nil
}

// imageUsable pulls ref through the CRI, as the kubelet would, or waits until the CRI finds it.
func imageUsable(ctx context.Context, n *rehearsal.BakedNode, ref string, pull bool) error {
	if pull {
		_, err := n.Exec(ctx, append(crictl, "pull", ref)...)
		return err
	}
	return drills.WaitUntil(time.Minute, func() error { _, err := n.Exec(ctx, append(crictl, "inspecti", ref)...); return err })
}

// throttle is a TCP proxy on loopback to target that sends each connection's responses at no
// more than bytesPerSecond.
func throttle(target string, bytesPerSecond int) (net.Listener, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	go func() {
		for {
			client, err := l.Accept()
			if err != nil {
				return
			}
			go func() {
				defer client.Close()
				server, err := net.Dial("tcp", target)
				if err != nil {
					return
				}
				defer server.Close()
				go func() { _, _ = io.Copy(server, client) }()
				buf := make([]byte, 64<<10)
				start, sent := time.Now(), 0
				for {
					n, err := server.Read(buf)
					if n > 0 {
						if _, werr := client.Write(buf[:n]); werr != nil {
							return
						}
						sent += n
						if ahead := time.Duration(float64(sent)/float64(bytesPerSecond)*float64(time.Second)) - time.Since(start); ahead > 0 {
							time.Sleep(ahead)
						}
					}
					if err != nil {
						return
					}
				}
			}()
		}
	}()
	return l, nil
}
