// Package pull_test is the image pull benchmark (scripts/bench-pull.sh): how long a fresh worker
// machine, booted from its image, takes until a large image is usable, pulled with containerd's
// defaults, pulled with the settings the image renders (L20-L24), and preloaded into the image
// (L26).
package pull_test

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/clusterforge/clusterforge/components/machine"
	"github.com/clusterforge/clusterforge/components/spec"
	"github.com/clusterforge/clusterforge/components/wellknown"
	"github.com/clusterforge/clusterforge/infra/offline"
	"github.com/clusterforge/clusterforge/test/drills"
	"github.com/clusterforge/clusterforge/test/machines"
	"github.com/clusterforge/clusterforge/test/machines/nspawn"
	"github.com/clusterforge/clusterforge/test/netns"
)

// scripts/bench-pull.sh sets these: a large image in a registry on this host, and a worker image
// with the same image baked in.
var (
	stackName      = flag.String("stack", "dev", "stack to boot, with its images baked (make images-local)")
	pullImage      = flag.String("pull-image", "", "large image the benchmark pulls from a registry on this host (127.0.0.1:PORT/...)")
	preloadedImage = flag.String("preloaded-image", "", "worker image tarball with -pull-image baked in")
	connectionMiBs = flag.Int("per-connection-mibps", 64, "the remote-registry model: each connection's throughput, MiB/s")
)

// The boot runs its load balancer and metadata service and host forwarder as `<this binary> lb|imds|forward ...`.
func TestMain(m *testing.M) {
	machines.ServeSubcommand()
	flag.Parse()
	os.Exit(m.Run())
}

// bench is one boot of the stack and the registry its first worker reaches on its own loopback.
type bench struct {
	booted *nspawn.Booted
	worker string
	// refs maps a network model to the image's reference through it.
	refs map[string]string
}

// pullDropIn makes the worker's containerd run on an empty configuration: containerd's own
// defaults (3 concurrent downloads, the same root and socket).
const pullDropIn = machine.UnitDir + "/" + machine.ContainerdUnit + ".d/90-pull-bench.conf"

// BenchmarkImageReady is the time from a fresh worker's start (a clean shutdown, a new empty local
// disk, systemd-nspawn started again) until the large image is usable: pulled through the CRI as
// the kubelet pulls, or found in the store containerd-disk.service seeded. The part until
// containerd's CRI answered is reported as s-until-CRI. Pulls run twice: from the registry
// directly, and through a proxy that holds each connection to -per-connection-mibps, as a remote
// registry or CDN serves each stream.
func BenchmarkImageReady(b *testing.B) {
	if *pullImage == "" || *preloadedImage == "" {
		b.Skip("needs -pull-image and -preloaded-image: run scripts/bench-pull.sh")
	}
	if os.Geteuid() != 0 {
		b.Fatal("booting machines needs root")
	}
	throttled := fmt.Sprintf("%dMiBps-per-connection", *connectionMiBs)
	type mode struct {
		name, network string
		defaults      bool
		preloaded     bool
	}
	var modes []mode
	for _, network := range []string{"loopback", throttled} {
		modes = append(modes,
			mode{name: network + "/pull-containerd-defaults", network: network, defaults: true},
			mode{name: network + "/pull-clusterforge-settings", network: network})
	}
	modes = append(modes, mode{name: "preloaded", network: "loopback", preloaded: true})

	images := filepath.Join(repoRoot(b), "build", "images")
	var current *bench
	var currentImage string
	defer func() {
		if current != nil {
			_ = current.booted.Down()
		}
	}()
	for _, m := range modes {
		image := filepath.Join(images, "node-"+*stackName+".tar")
		if m.preloaded {
			image = *preloadedImage
		}
		if image != currentImage {
			if current != nil {
				if err := current.booted.Down(); err != nil {
					b.Fatal(err)
				}
			}
			current, currentImage = boot(b, image, throttled), image
		}
		bn := current
		b.Run(m.name, func(b *testing.B) {
			for range b.N {
				b.StopTimer()
				ctx, cancel := context.WithTimeout(context.Background(), 30*time.Minute)
				dropIn := ""
				if m.defaults {
					dropIn = "[Service]\nExecStart=\nExecStart=" + machine.BinDir + "/containerd --config /dev/null\n"
				}
				if err := bn.fresh(dropIn); err != nil {
					b.Fatal(err)
				}
				b.StartTimer()
				start := time.Now()
				if err := bn.booted.Start(ctx, bn.worker); err != nil {
					b.Fatal(err)
				}
				if err := bn.criReady(ctx); err != nil {
					b.Fatal(err)
				}
				cri := time.Since(start)
				ref := bn.refs[m.network]
				if m.preloaded {
					ref = *pullImage // the name it was baked under
				}
				if err := bn.imageUsable(ctx, ref, !m.preloaded); err != nil {
					b.Fatal(err)
				}
				b.StopTimer()
				cancel()
				b.ReportMetric(cri.Seconds(), "s-until-CRI")
			}
		})
	}
}

// boot plans and boots the stack with workerImage as the worker image, and opens the registry to
// its first worker on that worker's loopback, directly and throttled.
func boot(b *testing.B, workerImage, throttled string) *bench {
	root := repoRoot(b)
	stackFile := spec.StackFile(filepath.Join(root, spec.StackDir), *stackName)
	c, err := spec.LoadStack(stackFile)
	if err != nil {
		b.Fatal(err)
	}
	work := filepath.Join(root, "build", "bench-pull")
	if _, err := offline.WriteStack(*stackName, stackFile, filepath.Join(work, "plan")); err != nil {
		b.Fatal(err)
	}
	self, err := os.Executable()
	if err != nil {
		b.Fatal(err)
	}
	o := nspawn.Options{
		Stack: *stackName, Name: *stackName + "-pull", Dir: filepath.Join(work, *stackName), Self: []string{self},
		Tools: filepath.Join(root, ".tools", "bin"), PlanDir: filepath.Join(work, "plan", *stackName),
		PKIFile: filepath.Join(work, "plan", *stackName+".pki.json"),
		Images: map[string]string{
			machine.ImageWorker:       workerImage,
			machine.ImageControlPlane: filepath.Join(root, "build", "images", "control-plane-"+*stackName+".tar"),
		},
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Minute)
	defer cancel()
	booted, err := nspawn.Boot(ctx, c, o, os.Stderr)
	if err != nil {
		b.Fatal(err)
	}
	bn := &bench{booted: booted, refs: map[string]string{}}
	for _, m := range booted.Machines {
		if m.Image == machine.ImageWorker && bn.worker == "" {
			bn.worker = m.Name
		}
	}
	ns, err := booted.MachineNetns(bn.worker)
	if err != nil {
		b.Fatal(err)
	}
	registry, repo, _ := strings.Cut(*pullImage, "/")
	for network, bytesPerSecond := range map[string]int{"loopback": 0, throttled: *connectionMiBs << 20} {
		l, err := netns.ListenerIn(ns, "tcp", "127.0.0.1:0")
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { l.Close() })
		go proxy(l, registry, bytesPerSecond)
		bn.refs[network] = l.Addr().String() + "/" + repo
	}
	return bn
}

// fresh shuts the worker down cleanly, gives it a new empty local disk, and writes the pull
// benchmark's containerd drop-in onto its OS disk ("" for none).
func (bn *bench) fresh(dropIn string) error {
	if err := bn.booted.StopMachine(context.Background(), bn.worker, false); err != nil {
		return err
	}
	if err := bn.booted.WipeLocalDisk(bn.worker); err != nil {
		return err
	}
	return bn.booted.WriteOSDisk(bn.worker, pullDropIn, []byte(dropIn), 0o644)
}

var crictl = []string{machine.BinDir + "/crictl", "--runtime-endpoint", wellknown.ContainerdEndpoint}

// criReady waits until the worker's containerd answers on its CRI socket.
func (bn *bench) criReady(ctx context.Context) error {
	err := drills.WaitUntil(5*time.Minute, func() error { _, err := bn.booted.Exec(ctx, bn.worker, append(crictl, "info")...); return err })
	if err != nil {
		return fmt.Errorf("the CRI does not answer: %w", err)
	}
	return nil
}

// imageUsable pulls ref through the CRI, as the kubelet would, or waits until the CRI finds it;
// either way the CRI must then know the image.
func (bn *bench) imageUsable(ctx context.Context, ref string, pull bool) error {
	if pull {
		if _, err := bn.booted.Exec(ctx, bn.worker, append(crictl, "pull", ref)...); err != nil {
			return err
		}
	}
	return drills.WaitUntil(time.Minute, func() error {
		_, err := bn.booted.Exec(ctx, bn.worker, append(crictl, "inspecti", ref)...)
		return err
	})
}

// proxy serves l's connections from target on this host, sending each connection's responses at
// no more than bytesPerSecond (0: as fast as they come).
func proxy(l net.Listener, target string, bytesPerSecond int) {
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
			if bytesPerSecond == 0 {
				_, _ = io.Copy(client, server)
				return
			}
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
}

// repoRoot is the repository's top directory, three levels up from this package.
func repoRoot(b *testing.B) string {
	root, err := filepath.Abs(filepath.Join("..", "..", ".."))
	if err != nil {
		b.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(root, "go.mod")); errors.Is(err, os.ErrNotExist) {
		b.Fatalf("%s is not the repository", root)
	}
	return root
}
