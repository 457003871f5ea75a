package nspawn

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/clusterforge/clusterforge/components/machine"
	"github.com/clusterforge/clusterforge/components/spec"
	"github.com/clusterforge/clusterforge/test/machines"
	"github.com/clusterforge/clusterforge/test/standin/arm"
	"github.com/clusterforge/clusterforge/test/standin/imds"
)

// createInstance boots a machine for an instance that a scale set's growth made in Resource
// Manager's stand-in, as Azure provisions a VM: named and identified as the stand-in made it
// (computer name, vmId, zone), given addresses past every address its VNet's machines hold (its
// own, then its pool's maxPods pod IPs: deviation "network") and its pool's user-data. It returns
// the machine's address once systemd runs; the machine joins on its own, as a VM does. Only
// worker scale sets grow here; a create that fails leaves nothing behind.
func (b *Booted) createInstance(ctx context.Context, in arm.Instance) (addr string, err error) {
	set, ok := b.Cluster.ScaleSetOf(in.ScaleSet)
	if !ok {
		return "", fmt.Errorf("boot: %s is no worker scale set; only workers are created here", in.ScaleSet)
	}
	vnet, ok := b.Cluster.VNetOf(set)
	if !ok {
		return "", fmt.Errorf("boot: scale set %s has no VNet", in.ScaleSet)
	}
	role := spec.WorkerRole(set.Pool.Name)
	b.mu.Lock()
	if slices.ContainsFunc(b.Machines, func(m *Machine) bool { return m.Name == in.ComputerName }) {
		b.mu.Unlock()
		return "", fmt.Errorf("boot: a machine is named %s already", in.ComputerName)
	}
	m, err := b.placeInstance(in, role, netip.MustParsePrefix(vnet.Prefix).Masked(), set.Pool.MaxPods)
	if err == nil {
		b.Machines = append(slices.Clip(b.Machines), m)
		b.Instances = append(slices.Clip(b.Instances), machines.Instance{Name: m.Name, Role: m.Role, IP: m.Address})
	}
	b.mu.Unlock()
	if err != nil {
		return "", err
	}
	defer func() {
		if err != nil {
			err = errors.Join(err, b.removeMachine(ctx, m))
		}
	}()
	b.logf("%s: creating %s for scale set %s at %s (vmId %s, zone %s)", in.ComputerName, role, in.ScaleSet, m.Address, m.VMID, m.Zone)
	if err := b.net.attach(m.index, m.prefix, m.MAC, m.PodIPs); err != nil {
		return "", err
	}
	if err := b.writeMetadata(); err != nil {
		return "", err
	}
	if err := b.create(m); err != nil {
		return "", err
	}
	if err := b.Start(ctx, m.Name); err != nil {
		return "", err
	}
	return m.Address, nil
}

// placeInstance places a new worker machine in its VNet past the highest address its machines
// hold and the addresses Azure keeps, with the index after the highest (its namespace's and veth's names).
// A deleted machine's namespace goes with it, so the highest's may be given again. Called with
// b.mu held.
func (b *Booted) placeInstance(in arm.Instance, role string, vnet netip.Prefix, maxPods int) (*Machine, error) {
	next := addrAdd(vnet.Addr(), azureReservedAddresses)
	index := 0
	for _, m := range b.Machines {
		index = max(index, m.index+1)
		for _, a := range append([]string{m.Address}, m.PodIPs...) {
			if addr, err := netip.ParseAddr(a); err == nil && vnet.Contains(addr) && !addr.Less(next) {
				next = addr.Next()
			}
		}
	}
	m := &Machine{Name: in.ComputerName, Role: role, Image: machine.ImageOf(role), Address: next.String(), Zone: in.Zone, VMID: in.VMID,
		MAC: macOf(index), index: index, prefix: netip.PrefixFrom(next, vnet.Bits())}
	for range maxPods {
		next = next.Next()
		m.PodIPs = append(m.PodIPs, next.String())
	}
	if !vnet.Contains(next) {
		return nil, fmt.Errorf("boot: VNet %s is full: no room for %s and its %d pod IPs", vnet, in.ComputerName, maxPods)
	}
	return m, nil
}

// deleteInstance stops and removes the machine behind a deleted instance, as Azure deletes a VM
// and its NIC.
func (b *Booted) deleteInstance(ctx context.Context, in arm.Instance) error {
	m, err := b.Machine(in.ComputerName)
	if err != nil {
		return err
	}
	if m.Image != machine.ImageWorker {
		return fmt.Errorf("boot: %s is a %s; only workers are deleted here", m.Name, m.Role)
	}
	if err := b.removeMachine(ctx, m); err != nil {
		return err
	}
	b.logf("%s: deleted with its instance", m.Name)
	return nil
}

// removeMachine stops a worker machine and removes what it had, whatever of it was made: its
// disks, its network namespace, its pod IPs' routes, its metadata, its place in the lists.
func (b *Booted) removeMachine(ctx context.Context, m *Machine) error {
	var errs []error
	if err := b.StopMachine(ctx, m.Name, true); err != nil {
		return err // still running: nothing may go from under it
	}
	if m.Root != "" {
		if err := unix.Unmount(m.Root, 0); err != nil && !errors.Is(err, unix.EINVAL) && !errors.Is(err, unix.ENOENT) {
			return fmt.Errorf("unmount %s's OS disk: %w", m.Name, err)
		}
		errs = append(errs, b.detachDisk(m))
	}
	errs = append(errs, b.net.detach(m.index, m.PodIPs), removeTree(b.machineDir(m)))
	b.mu.Lock()
	b.Machines = slices.DeleteFunc(slices.Clone(b.Machines), func(x *Machine) bool { return x == m })
	b.Instances = slices.DeleteFunc(slices.Clone(b.Instances), func(x machines.Instance) bool { return x.Name == m.Name })
	b.mu.Unlock()
	return errors.Join(append(errs, b.writeMetadata(), b.writeMachines())...)
}

// metadataFile is what the metadata stand-in serves: address → imds.InstanceMetadata, read again
// when it changes.
func (b *Booted) metadataFile() string { return filepath.Join(b.Dir, "imds.json") }

// writeMetadata writes what the metadata service says of every machine, one write at a time.
func (b *Booted) writeMetadata() error {
	b.metadataMu.Lock()
	defer b.metadataMu.Unlock()
	b.mu.Lock()
	meta := map[string]imds.InstanceMetadata{}
	for _, m := range b.Machines {
		meta[m.Address] = b.metadata(m)
	}
	b.mu.Unlock()
	data, err := json.MarshalIndent(meta, "", "  ")
	if err != nil {
		return err
	}
	// Written whole then renamed: the stand-in reads it at any moment.
	tmp, err := os.CreateTemp(filepath.Dir(b.metadataFile()), "imds-*.json")
	if err != nil {
		return err
	}
	_, werr := tmp.Write(append(data, '\n'))
	if err := errors.Join(werr, tmp.Chmod(0o644), tmp.Close()); err != nil {
		os.Remove(tmp.Name())
		return err
	}
	return os.Rename(tmp.Name(), b.metadataFile())
}

// detach removes machine i's namespace (its veth pair with it) and the hub's routes to podIPs.
func (n *bootNetwork) detach(i int, podIPs []string) error {
	var routes strings.Builder
	for _, p := range podIPs {
		fmt.Fprintf(&routes, "route del %s/32\n", p)
	}
	var errs []error
	if len(podIPs) > 0 {
		if err := ipBatch(n.Hub, routes.String()); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(append(errs, ip("netns", "del", n.machineNetns(i)))...)
}
