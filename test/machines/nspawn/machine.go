package nspawn

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/clusterforge/clusterforge/components/etcdbackup"
	"github.com/clusterforge/clusterforge/components/machine"
	"github.com/clusterforge/clusterforge/components/spec"
	"github.com/clusterforge/clusterforge/test/machines"
	"github.com/clusterforge/clusterforge/test/standin/azuredns"
)

// bootDiskSize is the sparse file behind each machine's local temp/NVMe disk.
const bootDiskSize = 8 << 30

// Paths of a booted machine, under <dir>/machines/<name>/.
func (b *Booted) machineDir(m *Machine) string { return filepath.Join(b.MachinesDir(), m.Name) }
func (b *Booted) imageDir(image string) string { return filepath.Join(b.Dir, "images", image) }

// diskFile backs the machine's local disk; diskDir holds its device node, bound at /dev/disk/azure.
func (b *Booted) diskFile(m *Machine) string {
	return filepath.Join(b.machineDir(m), "local-disk.img")
}
func (b *Booted) diskDir(m *Machine) string {
	return filepath.Join(b.machineDir(m), "dev-disk-azure")
}

// unpackImages extracts each image the machines boot once, into <dir>/images/<image>: the lower,
// read-only layer of every machine's root. An image already extracted from the same tarball is kept.
func (b *Booted) unpackImages(ctx context.Context) error {
	needed := map[string]bool{}
	for _, m := range b.Machines {
		needed[m.Image] = true
	}
	var images []string
	for image := range needed {
		images = append(images, image)
	}
	sort.Strings(images)
	errs := make([]error, len(images))
	done := make(chan struct{})
	for i, image := range images {
		go func() {
			defer func() { done <- struct{}{} }()
			errs[i] = b.unpack(ctx, image)
		}()
	}
	for range images {
		<-done
	}
	if err := errors.Join(errs...); err != nil {
		return err
	}
	if needed[machine.ImageWorker] {
		sysctls, err := os.ReadFile(filepath.Join(b.imageDir(machine.ImageWorker), machine.SysctlPath))
		if err != nil {
			return err
		}
		changed, err := setHostKernel("/proc/sys", string(sysctls))
		if len(changed) > 0 {
			b.logf("this host's kernel, which the machines share, now has the image's settings the machines need: %s (deviation \"kernel\")", strings.Join(changed, ", "))
		}
		if err != nil {
			return err
		}
	}
	return nil
}

func (b *Booted) unpack(ctx context.Context, image string) error {
	tarball, ok := b.opts.Images[image]
	if !ok {
		return fmt.Errorf("boot: no %s image given", image)
	}
	info, err := os.Stat(tarball)
	if err != nil {
		return fmt.Errorf("boot: the %s image: %w (bake it: make image-local ROLE=%s STACK=%s)", image, err, image, b.opts.Stack)
	}
	dir, stamp := b.imageDir(image), b.imageDir(image)+".stamp"
	want := fmt.Sprintf("%s %d %d", tarball, info.Size(), info.ModTime().UnixNano())
	if got, _ := os.ReadFile(stamp); string(got) == want {
		b.logf("image %s: %s already unpacked", image, tarball)
		return nil
	}
	b.logf("image %s: unpacking %s (%s)", image, tarball, spec.GiB(info.Size()))
	if err := removeTree(dir); err != nil {
		return err
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	if out, err := exec.CommandContext(ctx, "tar", "--numeric-owner", "--xattrs", "--xattrs-include=*", "-C", dir, "-xf", tarball).CombinedOutput(); err != nil {
		return fmt.Errorf("unpack %s: %v: %s", tarball, err, out)
	}
	return os.WriteFile(stamp, []byte(want), 0o644)
}

// CloudInitSeed is where a machine's NoCloud datasource lies, its user-data with the join token
// among it; Azure's custom data comes from the provisioning media instead.
const CloudInitSeed = "/var/lib/cloud/seed/nocloud"

// create makes a machine's disks: the OS disk, its image under an overlay whose upper layer holds
// what the machine writes, seeded with the user-data for cloud-init (deviation "cloud-init
// datasource"); and the local disk, a loop device over a sparse file.
func (b *Booted) create(m *Machine) error {
	dir := b.machineDir(m)
	m.Root = filepath.Join(dir, "root")
	for _, d := range []string{filepath.Join(dir, "upper"), filepath.Join(dir, "work"), m.Root} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			return err
		}
	}
	opts := fmt.Sprintf("lowerdir=%s,upperdir=%s,workdir=%s", b.imageDir(m.Image), filepath.Join(dir, "upper"), filepath.Join(dir, "work"))
	if err := unix.Mount("overlay", m.Root, "overlay", 0, opts); err != nil {
		return fmt.Errorf("mount the OS disk: %w", err)
	}
	if err := b.attachDisk(m); err != nil {
		return err
	}
	userData, err := os.ReadFile(b.userData(m.Role))
	if err != nil {
		return err
	}
	seed := CloudInitSeed
	files := []machine.File{
		{Path: seed + "/meta-data", Content: "instance-id: " + m.Name + "\nlocal-hostname: " + m.Name + "\n", Mode: 0o600},
		{Path: seed + "/user-data", Content: string(userData), Mode: 0o600},
		{Path: seed + "/network-config", Content: "network:\n  config: disabled\n", Mode: 0o600},
		// The resolver Azure's DHCP names, as it would write it.
		{Path: "/etc/resolv.conf", Content: "nameserver " + azuredns.Address + "\n", Mode: 0o644},
	}
	files = append(files, machine.File{Path: bootInit, Content: bootInitScript, Mode: 0o755})
	deviations, err := b.machineDeviations(m)
	if err != nil {
		return err
	}
	for _, f := range append(files, deviations...) {
		if err := machines.WriteFile(filepath.Join(m.Root, f.Path), f.Content, os.FileMode(f.Mode)); err != nil {
			return err
		}
	}
	return nil
}

// machineDeviations are files the boot adds to a machine before its first boot: a worker's pod
// network reading its NIC's IP configurations from a file (deviation "pod IPs"), containerd's
// config edited (deviation "kernel") and the kubelet's nodefs thresholds dropped (deviation "OS
// disk"), the backup store's address for the main etcd's units (deviation "backup store"), and
// the cloud the CSR approver calls (deviation "Resource Manager").
func (b *Booted) machineDeviations(m *Machine) ([]machine.File, error) {
	if m.Image == machine.ImageWorker {
		config, err := os.ReadFile(filepath.Join(b.imageDir(m.Image), machine.ContainerdConfigPath))
		if err != nil {
			return nil, err
		}
		section := machine.ContainerdRuntimeSection + "\n"
		if !strings.Contains(string(config), section) {
			return nil, fmt.Errorf("deviation \"kernel\": %s has no %q; update machineDeviations", machine.ContainerdConfigPath, section)
		}
		edited := strings.Replace(string(config), section, section+"  restrict_oom_score_adj = true\n", 1)
		interfaces, err := nicInterfaces(m)
		if err != nil {
			return nil, err
		}
		return []machine.File{
			{Path: machine.AzureCNIConfPath, Content: machine.AzureCNIConflist(machine.IPAMFromFile), Mode: 0o644},
			{Path: machine.IPAMInterfacesPath, Content: interfaces, Mode: 0o644},
			{Path: machine.ContainerdConfigPath, Content: edited, Mode: 0o644},
			{Path: machine.UnitDir + "/" + machine.KubeletUnit + ".d/" + machines.KubeletHostDropIn, Content: kubeletHostDropIn, Mode: 0o644},
		}, nil
	}
	if m.Role == spec.RoleAPIServer {
		return b.approverAzure()
	}
	if m.Role != spec.RoleEtcdMain {
		return nil, nil
	}
	dropIn := "[Service]\nEnvironment=\"" + etcdbackup.ConnectionStringEnv + "=" + b.StoreConnectionString() + "\"\n"
	var files []machine.File
	for _, unit := range machine.EtcdBackupStoreUnits {
		files = append(files, machine.File{Path: machine.UnitDir + "/" + unit + ".d/" + machines.StoreDropIn, Content: dropIn, Mode: 0o644})
	}
	return files, nil
}

// kubeletHostDropIn edits the kubelet's config before each start for this host: it drops the
// nodefs eviction thresholds (deviation "OS disk": a worker's OS disk is an overlay on this host's
// disk, whose free space is not the machine's, and a full host would evict every pod; the other
// thresholds stay as rendered), and lets the kubelet run on this host's cgroup v1 (deviation
// "cgroup v2").
const kubeletHostDropIn = `[Service]
ExecStartPre=/bin/sed -i -e '/^  nodefs[.]/d' -e 's/^` + machine.FailCgroupV1 + `: true$/` + machine.FailCgroupV1 + `: false/' ` + machine.KubeletConfigPath + `
`

// protectedKernelSettings are what the kubelet's protectKernelDefaults compares with its defaults
// (pkg/kubelet/cm's setupKernelTunables): this host must hold the image's values exactly.
var protectedKernelSettings = []string{"vm.overcommit_memory", "vm.panic_on_oom", "kernel.panic", "kernel.panic_on_oops",
	"kernel.keys.root_maxkeys", "kernel.keys.root_maxbytes"}

// sharedLimits are the image's limits that count for every machine together here, since all run
// as this host's root in its user namespace: this host must hold at least the image's values. With
// the default 128 inotify instances, a worker's containerd started without its CRI plugin ("failed
// to create fsnotify watcher: too many open files") and its kubelet never came back.
var sharedLimits = []string{"fs.inotify.max_user_instances", "fs.inotify.max_user_watches"}

// setHostKernel gives this host's kernel, which every machine shares, the image's values of the
// settings the kubelet's protectKernelDefaults checks and at least the image's shared limits
// (deviation "kernel"): a machine's /proc/sys is read-only. It returns what it changed, as
// "key: host → image".
func setHostKernel(procSys, imageSysctls string) ([]string, error) {
	var changed []string
	for _, line := range strings.Split(imageSysctls, "\n") {
		key, value, ok := strings.Cut(line, "=")
		key, value = strings.TrimSpace(key), strings.TrimSpace(value)
		exact, atLeast := slices.Contains(protectedKernelSettings, key), slices.Contains(sharedLimits, key)
		if !ok || !exact && !atLeast {
			continue
		}
		path := filepath.Join(procSys, strings.ReplaceAll(key, ".", "/"))
		host, err := os.ReadFile(path)
		if err != nil {
			return changed, err
		}
		got := strings.TrimSpace(string(host))
		if got == value {
			continue
		}
		if atLeast {
			have, err1 := strconv.ParseInt(got, 10, 64)
			want, err2 := strconv.ParseInt(value, 10, 64)
			if err := errors.Join(err1, err2); err != nil {
				return changed, fmt.Errorf("%s: %w", key, err)
			}
			if have >= want {
				continue
			}
		}
		if err := os.WriteFile(path, []byte(value), 0o644); err != nil {
			return changed, fmt.Errorf("set %s to %s, as the machines need: %w", key, value, err)
		}
		changed = append(changed, fmt.Sprintf("%s: %s → %s", key, got, value))
	}
	return changed, nil
}

// attachDisk backs the machine's local disk with a new sparse file on a loop device, whose node
// the machine sees as /dev/disk/azure/resource, the name azure-vm-utils gives the SCSI resource disk.
func (b *Booted) attachDisk(m *Machine) error {
	if err := os.WriteFile(b.diskFile(m), nil, 0o600); err != nil {
		return err
	}
	if err := os.Truncate(b.diskFile(m), bootDiskSize); err != nil {
		return err
	}
	out, err := exec.Command("losetup", "--find", "--show", b.diskFile(m)).Output()
	if err != nil {
		return fmt.Errorf("losetup %s: %w", b.diskFile(m), err)
	}
	var st unix.Stat_t
	if err := unix.Stat(strings.TrimSpace(string(out)), &st); err != nil {
		return err
	}
	if err := os.RemoveAll(b.diskDir(m)); err != nil {
		return err
	}
	if err := os.MkdirAll(b.diskDir(m), 0o755); err != nil {
		return err
	}
	return unix.Mknod(filepath.Join(b.diskDir(m), "resource"), unix.S_IFBLK|0o600, int(st.Rdev))
}

// detachDisk removes the machine's local disk: its loop devices, backing file and device node.
// The (empty) directory stays: the machine binds it at /dev/disk/azure.
func (b *Booted) detachDisk(m *Machine) error {
	if err := detachLoops(b.diskFile(m)); err != nil {
		return err
	}
	if err := errors.Join(os.RemoveAll(b.diskFile(m)), os.RemoveAll(b.diskDir(m))); err != nil {
		return err
	}
	return os.MkdirAll(b.diskDir(m), 0o755)
}

// detachLoops detaches every loop device backed by a file under path.
func detachLoops(path string) error {
	out, err := exec.Command("losetup", "--list", "--noheadings", "--raw", "--output", "NAME,BACK-FILE").Output()
	if err != nil {
		return fmt.Errorf("losetup --list: %w", err)
	}
	var errs []error
	for _, line := range strings.Split(string(out), "\n") {
		dev, file, ok := strings.Cut(strings.TrimSpace(line), " ")
		file = strings.TrimSuffix(file, " (deleted)")
		if ok && (file == path || strings.HasPrefix(file, path+"/")) {
			if out, err := exec.Command("losetup", "-d", dev).CombinedOutput(); err != nil {
				errs = append(errs, fmt.Errorf("losetup -d %s: %v: %s", dev, err, out))
			}
		}
	}
	return errors.Join(errs...)
}

// Start boots a machine from its disks: systemd-nspawn runs the image's systemd as PID 1 in the
// machine's network namespace, with its local disk. A running machine is left alone.
func (b *Booted) Start(ctx context.Context, name string) error {
	m, err := b.Machine(name)
	if err != nil {
		return err
	}
	b.mu.Lock()
	running := m.nspawn != nil && m.nspawn.Alive()
	b.mu.Unlock()
	if running {
		return nil
	}
	cgroups, err := machineCgroups(b.opts.Name, m.Name)
	if err != nil {
		return err
	}
	// Not --boot: the machine's PID 1 is bootInit, which execs systemd (deviation "machine cgroups").
	nspawn := []string{"systemd-nspawn", "--quiet", "--directory=" + m.Root, "--machine=" + m.Name,
		"--register=no", "--keep-unit", "--network-namespace-path=" + netnsPath(b.net.machineNetns(m.index)),
		"--bind=" + b.diskDir(m) + ":/dev/disk/azure", "--bind-ro=/dev/kmsg", "--capability=CAP_SYSLOG,CAP_NET_ADMIN", "--system-call-filter=@keyring",
		"--resolv-conf=off", "--timezone=off",
		"--link-journal=no", "--console=pipe", "--kill-signal=SIGRTMIN+3", bootInit}
	proc, err := machines.SpawnProcess(machines.InCgroups(cgroups, nspawn), []string{nodePath}, b.machineDir(m), filepath.Join(b.LogDir(), m.Name+".console.log"), false)
	if err != nil {
		return err
	}
	proc.Role, proc.Machine, proc.Name, proc.Command = m.Role, m.Name, "systemd-nspawn", nspawn
	var leader int
	err = machines.Poll(ctx, 30*time.Second, m.Name+" systemd", func(context.Context) error {
		if !proc.Alive() {
			return machines.Permanent{Err: fmt.Errorf("systemd-nspawn exited: %v (log %s)", proc.Err(), proc.Log)}
		}
		leader = containerLeader(proc.PID)
		if leader == 0 {
			return fmt.Errorf("no container yet")
		}
		return nil
	})
	if err != nil {
		_ = proc.Stop(syscall.SIGKILL, 5*time.Second)
		return err
	}
	b.mu.Lock()
	m.nspawn, m.PID = proc, leader
	b.mu.Unlock()
	if err := b.track(proc); err != nil {
		return err
	}
	return b.writeMachines()
}

// bootInit is every booted machine's PID 1 until it execs systemd (deviation "machine cgroups"):
// systemd-nspawn mounts the cgroup v1 controllers read-only, where a VM's systemd finds them
// writable and delegates them to the kubelet and containerd.
const bootInit = "/usr/local/lib/clusterforge-boot/init"

const bootInitScript = `#!/bin/sh
# clusterforge boot (deviation "machine cgroups"): make the cgroup controllers writable, as on a VM.
for c in /sys/fs/cgroup/*/; do mount -o remount,rw,bind "$c"; done
# Deviation "kernel": the network settings are this machine's own (its network namespace), so
# they are writable as on a VM, and the image's net.* sysctls that exist here are applied.
mount --bind /proc/sys/net /proc/sys/net && mount -o remount,rw,bind /proc/sys/net
grep -h '^net\.' /etc/sysctl.d/*.conf | while IFS=' =' read -r key value; do
  f=/proc/sys/$(echo "$key" | tr . /)
  if [ -e "$f" ] && ! (echo "$value" > "$f") 2>/dev/null; then echo "clusterforge boot: $key is the host's, left as is"; fi
done
exec /lib/systemd/systemd "$@"
`

// machineCgroups makes the machine's own cgroup in every hierarchy, under this process's:
// <hierarchy>/<own path>/cfboot-<boot>/<machine>. Each machine's kubelet and containerd then
// have a subtree of their own, as on separate VMs.
func machineCgroups(boot, name string) ([]string, error) {
	return machines.MakeCgroups(Hub(boot), name)
}

// containerLeader is the child of systemd-nspawn that runs systemd, or 0.
func containerLeader(nspawn int) int {
	children, _ := os.ReadFile(fmt.Sprintf("/proc/%d/task/%d/children", nspawn, nspawn))
	for _, f := range strings.Fields(string(children)) {
		pid, _ := strconv.Atoi(f)
		if comm, _ := os.ReadFile(fmt.Sprintf("/proc/%d/comm", pid)); strings.TrimSpace(string(comm)) == "systemd" {
			return pid
		}
	}
	return 0
}

// StopMachine stops a machine: hard is a crash (every process of the machine killed at once),
// otherwise a clean shutdown by its systemd. Its disks stay.
func (b *Booted) StopMachine(_ context.Context, name string, hard bool) error {
	m, err := b.Machine(name)
	if err != nil {
		return err
	}
	b.mu.Lock()
	proc, leader := m.nspawn, m.PID
	b.mu.Unlock()
	if proc == nil || !proc.Alive() {
		return nil
	}
	if !hard {
		_ = syscall.Kill(leader, sigPoweroff)
		if !proc.WaitExit(90 * time.Second) {
			hard = true // a shutdown that hangs ends as a crash, as Azure's stop does
		}
	}
	if hard {
		_ = syscall.Kill(leader, syscall.SIGKILL) // the kernel ends the machine's whole PID namespace
		if !proc.WaitExit(10 * time.Second) {
			if err := proc.Stop(syscall.SIGKILL, 5*time.Second); err != nil {
				return err
			}
		}
	}
	b.mu.Lock()
	m.PID = 0
	b.mu.Unlock()
	return b.writeMachines()
}

// sigPoweroff is SIGRTMIN+4, which systemd as PID 1 takes as `systemctl poweroff`.
const sigPoweroff = syscall.Signal(34 + 4)

// WipeLocalDisk gives a stopped machine a new, empty local disk, as Azure does on deallocation.
func (b *Booted) WipeLocalDisk(name string) error {
	m, err := b.stopped(name)
	if err != nil {
		return err
	}
	if err := b.detachDisk(m); err != nil {
		return err
	}
	return b.attachDisk(m)
}

// RemoveLocalDisk takes a stopped machine's local disk away: it boots with no device under
// /dev/disk/azure, as a VM whose disk failed.
func (b *Booted) RemoveLocalDisk(name string) error {
	m, err := b.stopped(name)
	if err != nil {
		return err
	}
	return b.detachDisk(m)
}

func (b *Booted) stopped(name string) (*Machine, error) {
	m, err := b.Machine(name)
	if err != nil {
		return nil, err
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if m.PID != 0 {
		return nil, fmt.Errorf("boot: %s is running; stop it first", name)
	}
	return m, nil
}

// Down removes every machine, service, mount, loop device and namespace of the boot.
func (b *Booted) Down() error {
	b.CloseMachines()
	return Down(b.opts.Name, b.Dir, b.progress)
}

// CloseMachines stops serving the machines to Resource Manager's stand-in: its creates, deletes
// and reimages fail from then on.
func (b *Booted) CloseMachines() {
	if b.machinesSocket != nil {
		b.machinesSocket.Close()
	}
}

// Down removes what the boot name in dir made, even one run by another command: its
// machines (killed), the platform stand-ins, the OS-disk mounts, the loop devices and the network
// namespaces. The unpacked images and the logs stay.
func Down(name, dir string, progress io.Writer) error {
	if !bootName.MatchString(name) {
		return fmt.Errorf("boot: the name %q names namespaces and cgroups here: use 1 to 20 of [a-z0-9-]", name)
	}
	var recorded []*Machine
	if data, err := os.ReadFile(MachinesFile(dir)); err == nil {
		if err := json.Unmarshal(data, &recorded); err != nil {
			return fmt.Errorf("%s: %w", MachinesFile(dir), err)
		}
	}
	killed := 0
	for _, m := range recorded {
		if comm, _ := os.ReadFile(fmt.Sprintf("/proc/%d/comm", m.PID)); m.PID > 1 && strings.TrimSpace(string(comm)) == "systemd" {
			_ = syscall.Kill(m.PID, syscall.SIGKILL)
			killed++
		}
	}
	if err := machines.StopProcesses(dir, nil); err != nil {
		return err
	}
	layout := &machines.Layout{Options: machines.Options{Dir: dir}}
	mounts, err := mountsUnder(layout.MachinesDir())
	if err != nil {
		return err
	}
	var errs []error
	for _, mp := range mounts {
		if err := unix.Unmount(mp, 0); err != nil {
			errs = append(errs, fmt.Errorf("unmount %s: %w", mp, err))
		}
	}
	errs = append(errs, detachLoops(layout.MachinesDir()), removeNetworks(Hub(name)), machines.RemoveCgroups(Hub(name)))
	if err := errors.Join(errs...); err != nil {
		return err
	}
	if err := removeTree(layout.MachinesDir()); err != nil {
		return err
	}
	// The machines' Pulumi state describes objects gone with them.
	for _, f := range []string{MachinesFile(dir), layout.StoreDir(), PulumiDir(dir)} {
		if err := os.RemoveAll(f); err != nil {
			return err
		}
	}
	if progress != nil && (killed > 0 || len(mounts) > 0) {
		fmt.Fprintf(progress, "==> removed the boot %s: %d machines, %d mounts, namespaces %s*\n", name, killed, len(mounts), Hub(name))
	}
	return nil
}

// mountsUnder lists this mount namespace's mount points under dir, deepest first.
func mountsUnder(dir string) ([]string, error) {
	f, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var out []string
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) > 4 {
			mp := unescapeMount(fields[4])
			if mp == dir || strings.HasPrefix(mp, dir+"/") {
				out = append(out, mp)
			}
		}
	}
	sort.Slice(out, func(i, j int) bool { return len(out[i]) > len(out[j]) })
	return out, sc.Err()
}

// unescapeMount undoes mountinfo's octal escapes (\040 for a space).
func unescapeMount(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	out, err := strconv.Unquote(`"` + strings.ReplaceAll(s, `"`, `\"`) + `"`)
	if err != nil {
		return s
	}
	return out
}

// MemoryUsage is each running machine's working set (its memory cgroup's usage less inactive
// file cache, as the kubelet counts it), in bytes.
func (b *Booted) MemoryUsage() (map[string]int64, error) {
	usage := map[string]int64{}
	err := machines.ForEachCgroupHierarchy(func(dir string) error {
		if !strings.HasPrefix(dir, "/sys/fs/cgroup/memory/") {
			return nil
		}
		for _, m := range b.Machines {
			cg := filepath.Join(dir, Hub(b.opts.Name), m.Name)
			raw, err := os.ReadFile(filepath.Join(cg, "memory.usage_in_bytes"))
			if err != nil {
				return err
			}
			total, err := strconv.ParseInt(strings.TrimSpace(string(raw)), 10, 64)
			if err != nil {
				return err
			}
			stat, err := os.ReadFile(filepath.Join(cg, "memory.stat"))
			if err != nil {
				return err
			}
			for _, line := range strings.Split(string(stat), "\n") {
				if v, ok := strings.CutPrefix(line, "total_inactive_file "); ok {
					inactive, _ := strconv.ParseInt(v, 10, 64)
					total -= inactive
				}
			}
			usage[m.Name] = total
		}
		return nil
	})
	return usage, err
}

// nodePath is the PATH units run with, as systemd gives them.
const nodePath = "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"

// removeTree deletes dir without crossing into a mount that is still there.
func removeTree(dir string) error {
	if out, err := exec.Command("rm", "-rf", "--one-file-system", dir).CombinedOutput(); err != nil {
		return fmt.Errorf("remove %s: %v: %s", dir, err, out)
	}
	return nil
}
