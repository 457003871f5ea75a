package tenants

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/clusterforge/clusterforge/components/machine"
	"github.com/clusterforge/clusterforge/test/drills"
	"github.com/clusterforge/clusterforge/test/e2e/framework"
	"github.com/clusterforge/clusterforge/test/ociarchive"
	"github.com/clusterforge/clusterforge/test/podsecurity"
)

// hostTarget is what the escape shapes aim at: a setting of the kernel every machine shares,
// harmless to point at and global, so a write through a container shows on this host.
const hostTarget = "/proc/sys/kernel/core_pattern"

// The image shapes of runc's 2025 escapes (CVE-2025-31133: the image's /dev/null a symlink that
// runc's masking bind-mounts; CVE-2025-52565: /dev/console the same, for a terminal; CVE-2025-52881:
// runc's procfs writes redirected, here by /proc itself a link), each as a team's image run by a
// team's pod: each either is refused by the runtime or runs with runc's own devices and procfs,
// and this host's kernel setting is what it was. A plain image of the same binary must run, so a
// refusal is the shape's. The exploits themselves also race a mount shared with a second
// container, which this does not stage: it holds the shapes a team can ship, not a reproducer
// that a vulnerable runc would fail (the pinned runc's floor in versions.yaml carries that).
func RuncEscapeShapesAreContained(t *testing.T) {
	framework.NeedBoot(t)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	admin := drills.Clientset(t, framework.Booted)
	ns := drills.TeamNamespace(t, admin, "drill-escape", "a")
	drills.TeamQuotaHeld(t, admin, ns)
	tenant := tenantWithEdit(t, admin, ns, "drill-escaper")
	before, err := os.ReadFile(hostTarget)
	if err != nil {
		t.Fatal(err)
	}
	pause := filepath.Join(t.TempDir(), "pause")
	build := exec.Command("go", "build", "-o", pause, "./cmd/pause")
	build.Dir, build.Env = filepath.Join("..", "..", "..", "images"), append(os.Environ(), "CGO_ENABLED=0")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("building the pause binary: %v\n%s", err, out)
	}
	binary, err := os.ReadFile(pause)
	if err != nil {
		t.Fatal(err)
	}
	for _, shape := range []struct {
		name    string
		entries []ociarchive.Entry
		tty     bool
		check   string // run on the node against the container's pid: prints what runc gave it
		want    string
	}{
		{"plain", nil, false, "stat -c %F /proc/$pid/root/pause", "regular file"},
		{"dev-null", []ociarchive.Entry{{Name: "dev/", Dir: true, Mode: 0o755}, {Name: "dev/null", Link: hostTarget}}, false,
			"stat -c %F /proc/$pid/root/dev/null", "character special file"},
		{"dev-console", []ociarchive.Entry{{Name: "dev/", Dir: true, Mode: 0o755}, {Name: "dev/console", Link: hostTarget}}, true,
			"stat -c %F /proc/$pid/root/dev/console", "character special file"},
		{"proc-link", []ociarchive.Entry{{Name: "proc", Link: "/dev/shm"}}, false,
			"stat -f -c %T /proc/$pid/root/proc", "proc"},
	} {
		t.Run(shape.name, func(t *testing.T) {
			ref := "drill.local/escape-" + shape.name + ":1"
			entries := append([]ociarchive.Entry{{Name: "pause", Content: binary, Mode: 0o755}}, shape.entries...)
			for _, m := range framework.Booted.Machines {
				if m.Image != machine.ImageWorker {
					continue
				}
				archive := filepath.Join("var", "tmp", "escape-"+shape.name+".tar")
				if err := ociarchive.Write(filepath.Join(m.Root, archive), ref, entries, []string{"/pause"}, "65535"); err != nil {
					t.Fatal(err)
				}
				// As the bake preloads: the layers go once unpacked, so the content store stays as baked.
				if _, err := framework.Booted.Exec(ctx, m.Name, "ctr", "-n", "k8s.io", "images", "import", "--local", "--discard-unpacked-layers", "/"+archive); err != nil {
					t.Fatal(err)
				}
				t.Cleanup(func() { // the drill's images go, their blobs collected at once
					_, _ = framework.Booted.Exec(context.Background(), m.Name, "ctr", "-n", "k8s.io", "images", "rm", "--sync", ref)
				})
			}
			pod := podsecurity.Restricted(&corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "escape-" + shape.name}, Spec: corev1.PodSpec{
				TerminationGracePeriodSeconds: new(int64),
				Containers: []corev1.Container{{Name: "app", Image: ref, ImagePullPolicy: corev1.PullNever,
					TTY: shape.tty, Stdin: shape.tty}}}})
			if _, err := tenant.CoreV1().Pods(ns).Create(ctx, pod, metav1.CreateOptions{}); err != nil {
				t.Fatal(err)
			}
			var refused string
			if err := drills.WaitUntil(2*time.Minute, func() error {
				got, err := tenant.CoreV1().Pods(ns).Get(ctx, pod.Name, metav1.GetOptions{})
				if err != nil {
					return err
				}
				pod = got
				for _, c := range got.Status.ContainerStatuses {
					// The runtime's refusal: runc failed to create or start the container.
					for _, end := range []*corev1.ContainerStateTerminated{c.State.Terminated, c.LastTerminationState.Terminated} {
						if end != nil && end.Reason == "StartError" {
							refused = end.Reason + ": " + end.Message
							return nil
						}
					}
					if w := c.State.Waiting; w != nil && slices.Contains([]string{"CreateContainerError", "RunContainerError"}, w.Reason) {
						refused = w.Reason + ": " + w.Message
						return nil
					}
					if w := c.State.Waiting; w != nil && !slices.Contains([]string{"", "ContainerCreating", "CrashLoopBackOff"}, w.Reason) {
						return fmt.Errorf("the container waits: %s: %s", w.Reason, w.Message)
					}
					if c.State.Running != nil {
						return nil
					}
				}
				return fmt.Errorf("the pod is %s", got.Status.Phase)
			}); err != nil {
				t.Fatal(err)
			}
			switch {
			case refused != "" && shape.entries == nil:
				t.Fatalf("the plain image did not start: %s", refused)
			case refused != "":
				t.Logf("the runtime refused the container: %s", refused)
			default:
				out, err := framework.Booted.Exec(ctx, pod.Spec.NodeName, "sh", "-c",
					"pid=$(crictl inspect -o go-template --template '{{.info.pid}}' $(crictl ps -q --name app --pod $(crictl pods -q --namespace "+ns+" --name "+pod.Name+"))) && "+shape.check)
				if got := strings.TrimSpace(out); err != nil || got != shape.want {
					t.Errorf("the running container's %s: %q (%v), want %q: runc used the image's own", shape.name, got, err, shape.want)
				} else {
					t.Logf("the container runs with runc's own: %s", got)
				}
			}
			after, err := os.ReadFile(hostTarget)
			if err != nil {
				t.Fatal(err)
			}
			if string(after) != string(before) {
				t.Errorf("%s changed from %q to %q", hostTarget, before, after)
				_ = os.WriteFile(hostTarget, before, 0o644)
			}
		})
	}
}
