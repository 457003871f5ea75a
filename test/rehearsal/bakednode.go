package rehearsal

import (
	"context"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/clusterforge/clusterforge/components/machine"
	"github.com/clusterforge/clusterforge/test/machines"
)

// BakedNode is a machine booted from a node image that `make image-local` baked: the image's
// root filesystem in a mount namespace of its own, a loop device standing in for Azure's local
// SSD, and the image's units started by their rendered ExecStart, in the order given.
type BakedNode struct {
	// Root is the extracted image; Dir holds it, the logs and the local disk's backing file.
	Root, Dir string
	holder    *exec.Cmd // keeps the mount namespace alive; the namespace and its mounts go with it
	loop      string
	procs     []*machines.Proc
	progress  io.Writer
}

// localDiskSize is the sparse file behind the stand-in local SSD.
const localDiskSize = 8 << 30

// BootBakedNode extracts image (a root filesystem tarball) into dir and starts units, each from
// /etc/systemd/system/<unit> of the image: oneshots to completion, services left running.
func BootBakedNode(ctx context.Context, image, dir string, progress io.Writer, units ...string) (n *BakedNode, err error) {
	n = &BakedNode{Root: filepath.Join(dir, "root"), Dir: dir, progress: progress}
	defer func() {
		if err != nil {
			_ = n.Shutdown()
		}
	}()
	if err := machines.RemoveTree(dir); err != nil {
		return nil, err
	}
	if err := os.MkdirAll(n.Root, 0o755); err != nil {
		return nil, err
	}
	n.logf("extracting %s", image)
	if out, err := exec.CommandContext(ctx, "tar", "--numeric-owner", "--xattrs", "--xattrs-include=*", "-C", n.Root, "-xf", image).CombinedOutput(); err != nil {
		return nil, fmt.Errorf("extract %s: %v: %s", image, err, out)
	}
	if err := n.enterNamespace(); err != nil {
		return nil, err
	}
	if err := n.attachLocalDisk(ctx); err != nil {
		return nil, err
	}
	if err := n.Start(ctx, units...); err != nil {
		return nil, err
	}
	return n, nil
}

// enterNamespace starts the namespace holder and mounts what a booted machine has: the root as a
// mount of its own (the kubelet looks up the mount under its root dir), /proc, /sys (with its
// cgroup mounts), a private /dev with the usual nodes, and tmpfs /run and /tmp.
func (n *BakedNode) enterNamespace() error {
	n.holder = exec.Command("unshare", "--mount", "--propagation", "private", "sleep", "infinity")
	n.holder.SysProcAttr = &syscall.SysProcAttr{Setsid: true, Pdeathsig: syscall.SIGKILL}
	if err := n.holder.Start(); err != nil {
		return fmt.Errorf("mount namespace: %w", err)
	}
	// unshare has made the namespace once sleep runs in it.
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		self, _ := os.Readlink("/proc/self/ns/mnt")
		theirs, _ := os.Readlink(fmt.Sprintf("/proc/%d/ns/mnt", n.holder.Process.Pid))
		comm, _ := os.ReadFile(fmt.Sprintf("/proc/%d/comm", n.holder.Process.Pid))
		if theirs != "" && theirs != self && strings.TrimSpace(string(comm)) == "sleep" {
			break
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("mount namespace: unshare did not start")
		}
	}
	r := n.Root
	script := `set -e
mount --bind ` + r + ` ` + r + `
mount -t proc proc ` + r + `/proc
mount --rbind /sys ` + r + `/sys
mount -t tmpfs -o mode=755 dev ` + r + `/dev
for d in null zero full random urandom tty kmsg; do [ ! -e /dev/$d ] || cp -a /dev/$d ` + r + `/dev/; done
mkdir -p ` + r + `/dev/pts ` + r + `/dev/shm ` + r + `/dev/disk/azure
mount -t devpts -o newinstance,ptmxmode=0666 devpts ` + r + `/dev/pts
ln -s pts/ptmx ` + r + `/dev/ptmx
mount -t tmpfs shm ` + r + `/dev/shm
mount -t tmpfs -o mode=755 run ` + r + `/run
mount -t tmpfs tmp ` + r + `/tmp
`
	return n.host("mount the node's filesystems", "sh", "-c", script)
}

// attachLocalDisk backs /dev/disk/azure/resource, the name azure-vm-utils gives the SCSI local
// disk, with a loop device over a sparse file: the local-disk unit formats and mounts it.
func (n *BakedNode) attachLocalDisk(ctx context.Context) error {
	backing := filepath.Join(n.Dir, "local-ssd.img")
	if err := os.WriteFile(backing, nil, 0o600); err != nil {
		return err
	}
	if err := os.Truncate(backing, localDiskSize); err != nil {
		return err
	}
	out, err := exec.CommandContext(ctx, "losetup", "--find", "--show", backing).Output()
	if err != nil {
		return fmt.Errorf("losetup %s: %w", backing, err)
	}
	n.loop = strings.TrimSpace(string(out))
	n.logf("local SSD: %s on %s", n.loop, backing)
	return n.host("add the local disk", "sh", "-c", fmt.Sprintf("cp -a %s %s/dev/ && ln -s ../../%s %s/dev/disk/azure/resource",
		n.loop, n.Root, filepath.Base(n.loop), n.Root))
}

// Start runs the image's units in order, each from /etc/systemd/system/<unit>: its ExecStart,
// chrooted in the node; oneshots to completion, Type=notify services until they report ready (as
// systemd holds the units ordered after them), other services left running.
func (n *BakedNode) Start(ctx context.Context, units ...string) error {
	for _, name := range units {
		content, err := os.ReadFile(filepath.Join(n.Root, machine.UnitDir, name))
		if err != nil {
			return fmt.Errorf("unit %s is not in the image: %w", name, err)
		}
		uc, err := machines.ParseUnit(machine.Unit{Name: name, Content: string(content)})
		if err != nil {
			return err
		}
		vars, env, err := uc.Environment(func(f string) ([]byte, error) {
			out, err := n.Exec(ctx, "cat", f)
			return []byte(out), err
		})
		if err != nil {
			return err
		}
		argv := make([]string, len(uc.Exec))
		for i, word := range uc.Exec {
			argv[i] = machine.ExpandEnv(word, vars)
		}
		var notify *net.UnixConn
		if uc.Notify {
			addr := notifySocket(n, uc.Name)
			if notify, err = net.ListenUnixgram("unixgram", &net.UnixAddr{Name: addr, Net: "unixgram"}); err != nil {
				return err
			}
			env = append(env, "NOTIFY_SOCKET="+addr)
		}
		err = n.run(ctx, uc.Name, uc.Oneshot, env, argv...)
		if notify != nil {
			if err == nil {
				err = waitReady(ctx, notify, n.procs[len(n.procs)-1], uc.Name)
			}
			notify.Close()
		}
		if err != nil {
			return err
		}
	}
	return nil
}

// notifySocket is where a Type=notify unit of the node reports readiness: an abstract unix socket,
// which the chroot and mount namespace do not hide, as the node shares this host's network.
func notifySocket(n *BakedNode, unit string) string {
	return fmt.Sprintf("@clusterforge-notify-%s-%s", filepath.Base(n.Dir), unit)
}

// waitReady waits for a Type=notify unit's READY=1 on its socket, as systemd does before it
// starts the units ordered after it.
func waitReady(ctx context.Context, socket *net.UnixConn, p *machines.Proc, unit string) error {
	deadline := time.Now().Add(notifyTimeout)
	buf := make([]byte, 4096)
	for ctx.Err() == nil && p.Alive() {
		if err := socket.SetReadDeadline(time.Now().Add(time.Second)); err != nil {
			return err
		}
		k, err := socket.Read(buf)
		if err == nil && slices.Contains(strings.Split(string(buf[:k]), "\n"), "READY=1") {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%s: no READY=1 within %s", unit, notifyTimeout)
		}
	}
	if !p.Alive() {
		return fmt.Errorf("%s: exited before it was ready", unit)
	}
	return fmt.Errorf("%s: not ready: %w", unit, ctx.Err())
}

// notifyTimeout is systemd's default start timeout (TimeoutStartSec).
const notifyTimeout = 90 * time.Second

// Run runs argv in the node as the service name: to completion if oneshot, else left running
// until Shutdown. Its output goes to logs/<name>.log.
func (n *BakedNode) Run(ctx context.Context, name string, oneshot bool, argv ...string) error {
	return n.run(ctx, name, oneshot, nil, argv...)
}

func (n *BakedNode) run(ctx context.Context, name string, oneshot bool, env []string, argv ...string) error {
	log := filepath.Join(n.Dir, "logs", name+".log")
	verb := "starting"
	if oneshot {
		verb = "running"
	}
	n.logf("%s: %s %s", name, verb, strings.Join(argv, " "))
	p, err := machines.StartProcess(n.inNode(argv...), append(env, machines.NodePath), n.Dir, log)
	if err != nil {
		return err
	}
	p.Role, p.Machine, p.Name = "baked-node", filepath.Base(n.Dir), name
	if !oneshot {
		n.procs = append(n.procs, p)
		return nil
	}
	select {
	case <-p.Exited:
	case <-ctx.Done():
		_ = p.Stop(syscall.SIGKILL, time.Second)
		return fmt.Errorf("%s: %w", name, ctx.Err())
	}
	if p.WaitErr != nil {
		tail, _ := os.ReadFile(log)
		return fmt.Errorf("%s: %v\n%s", name, p.WaitErr, tail)
	}
	return nil
}

// Exec runs a command inside the node and returns its combined output.
func (n *BakedNode) Exec(ctx context.Context, args ...string) (string, error) {
	argv := n.inNode(args...)
	cmd := exec.CommandContext(ctx, argv[0], argv[1:]...)
	cmd.Env = []string{machines.NodePath}
	out, err := cmd.CombinedOutput()
	if err != nil {
		return string(out), fmt.Errorf("%s: %w: %s", strings.Join(args, " "), err, out)
	}
	return string(out), nil
}

// WriteFile writes a file inside the node, through its mount namespace (so /run is the node's).
func (n *BakedNode) WriteFile(path, content string, mode os.FileMode) error {
	argv := n.inNode("sh", "-c", `mkdir -p "$(dirname "$1")" && cat >"$1" && chmod "$2" "$1"`, "sh", path, fmt.Sprintf("%o", mode))
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Stdin = strings.NewReader(content)
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("write %s in the node: %v: %s", path, err, out)
	}
	return nil
}

func (n *BakedNode) inNode(args ...string) []string {
	return append([]string{"nsenter", "--target", fmt.Sprint(n.holder.Process.Pid), "--mount", "chroot", n.Root}, args...)
}

// host runs a command inside the node's mount namespace but with the host's root.
func (n *BakedNode) host(what string, args ...string) error {
	argv := append([]string{"nsenter", "--target", fmt.Sprint(n.holder.Process.Pid), "--mount"}, args...)
	if out, err := exec.Command(argv[0], argv[1:]...).CombinedOutput(); err != nil {
		return fmt.Errorf("%s: %v: %s", what, err, out)
	}
	return nil
}

// Shutdown stops the services (last started first), ends the namespace with its mounts, detaches
// the loop device and removes the node's directory. A second call does nothing more.
func (n *BakedNode) Shutdown() error {
	var errs []string
	for i := len(n.procs) - 1; i >= 0; i-- {
		if n.procs[i].Name == "containerd" && n.procs[i].Alive() {
			// Pods run in mount namespaces of their own, outside killNamespace's reach, and would
			// keep the local disk busy: remove them first, as a drain would.
			if out, err := n.Exec(context.Background(), machine.BinDir+"/crictl", "rmp", "--all", "--force"); err != nil {
				errs = append(errs, fmt.Sprintf("remove the node's pods: %v: %s", err, out))
			}
		}
		if err := n.procs[i].Stop(syscall.SIGTERM, 20*time.Second); err != nil {
			errs = append(errs, err.Error())
		}
	}
	n.procs = nil
	if n.holder != nil && n.holder.Process != nil {
		n.killNamespace()
		_ = n.holder.Wait()
		n.holder = nil
	}
	if n.loop != "" {
		if out, err := exec.Command("losetup", "-d", n.loop).CombinedOutput(); err != nil {
			errs = append(errs, fmt.Sprintf("losetup -d %s: %v: %s", n.loop, err, out))
		}
		n.loop = ""
	}
	if err := machines.RemoveTree(n.Dir); err != nil {
		errs = append(errs, err.Error())
	}
	if len(errs) > 0 {
		return fmt.Errorf("baked node shutdown: %s", strings.Join(errs, "; "))
	}
	return nil
}

// killNamespace kills every process in the node's mount namespace (containerd's shims and the
// containers outlive containerd by design), the holder last, so the namespace and its mounts end.
func (n *BakedNode) killNamespace() {
	ns, err := os.Readlink(fmt.Sprintf("/proc/%d/ns/mnt", n.holder.Process.Pid))
	if err != nil {
		return
	}
	for range 50 {
		pids, _ := filepath.Glob("/proc/[0-9]*/ns/mnt")
		alive := 0
		for _, p := range pids {
			if link, err := os.Readlink(p); err == nil && link == ns {
				var pid int
				fmt.Sscanf(p, "/proc/%d/ns/mnt", &pid)
				if pid != n.holder.Process.Pid {
					_ = syscall.Kill(pid, syscall.SIGKILL)
					alive++
				}
			}
		}
		if alive == 0 {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	_ = n.holder.Process.Kill()
}

func (n *BakedNode) logf(format string, args ...any) {
	if n.progress != nil {
		fmt.Fprintf(n.progress, "baked node: "+format+"\n", args...)
	}
}
