package nspawn

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/netip"
	"os/exec"
	"strings"

	"github.com/clusterforge/clusterforge/components/spec"
	"github.com/clusterforge/clusterforge/components/wellknown"
	"github.com/clusterforge/clusterforge/test/machines"
	"github.com/clusterforge/clusterforge/test/standin/azuredns"
)

// Where Azure's public services' stand-ins listen in the hub, under their public names.
var (
	entraAddr = netip.MustParseAddr(machines.EntraStandinAddress)
	armAddr   = netip.MustParseAddr(machines.ARMStandinAddress)
)

// bootNetwork is the network `make boot` makes (deviation "network"): a hub namespace with one
// bridge for each of the cluster's VNets (its subnets' gateways on it; the control plane's also
// holds the load balancer frontend, the instance metadata address, Azure DNS's and the addresses
// of Azure's public services), and one namespace per
// machine joined to its VNet's bridge by a veth pair, its eth0 configured before the machine
// starts, as Azure's DHCP would have it. As in a VNet, machines never meet at layer 2: the bridges'
// ports are isolated and the hub answers every ARP request (proxy ARP) and routes each packet, pod
// IPs to the worker whose NIC holds them. The hub forwards between every two bridges, as the
// cluster peers every two of its VNets, until unpeer cuts a pair. Nothing is routed out of the hub.
type bootNetwork struct {
	// Hub is the hub namespace's name, cfboot-<env>.
	Hub string
	// VNets are the cluster's VNets, the control plane's first.
	VNets []bootVNet
	// Extra are single addresses on the control plane's bridge: the load balancer frontend, the
	// metadata service, Azure DNS and Azure's public services.
	Extra []netip.Addr
}

// bootVNet is one VNet: a bridge in the hub namespace.
type bootVNet struct {
	Name   string
	Prefix netip.Prefix
	Bridge string
	// Gateways are its subnets' first addresses, with their prefix length.
	Gateways []netip.Prefix
}

func (v bootVNet) String() string { return fmt.Sprintf("%s %s on %s", v.Name, v.Prefix, v.Bridge) }

// newBootNetwork lays out the cluster's VNets: the control plane's with its two subnets, then
// every worker VNet, one subnet spanning it.
func newBootNetwork(hub string, c *spec.Cluster) *bootNetwork {
	gateway := func(p netip.Prefix) netip.Prefix { return netip.PrefixFrom(p.Addr().Next(), p.Bits()) }
	cp := bootVNet{Name: c.ControlPlaneVNetName(), Prefix: netip.MustParsePrefix(c.Network.AddressSpace).Masked(), Bridge: "vnet0"}
	for _, sub := range []string{c.Network.ControlPlaneSubnet, c.Network.EtcdSubnet} {
		cp.Gateways = append(cp.Gateways, gateway(netip.MustParsePrefix(sub).Masked()))
	}
	n := &bootNetwork{Hub: hub, VNets: []bootVNet{cp},
		Extra: []netip.Addr{netip.MustParseAddr(c.Network.APIServerIP), netip.MustParseAddr(wellknown.IMDSAddress), netip.MustParseAddr(azuredns.Address), entraAddr, armAddr}}
	for i, w := range c.WorkerVNets() {
		p := netip.MustParsePrefix(w.Prefix).Masked()
		n.VNets = append(n.VNets, bootVNet{Name: w.Name, Prefix: p, Bridge: fmt.Sprintf("vnet%d", i+1), Gateways: []netip.Prefix{gateway(p)}})
	}
	return n
}

// netnsPath is where `ip netns` keeps a named namespace.
func netnsPath(name string) string { return "/run/netns/" + name }

// machineNetns names machine i's namespace.
func (n *bootNetwork) machineNetns(i int) string { return fmt.Sprintf("%s-m%d", n.Hub, i) }

// create makes the hub namespace and its bridges.
func (n *bootNetwork) create() error {
	cmds := [][]string{{"netns", "add", n.Hub}, {"-n", n.Hub, "link", "set", "lo", "up"}}
	// The hub routes between the subnets and answers ARP for every address, back out of the port
	// the request came in (proxy_arp_pvlan), with no redirect to a machine it isolates (these
	// sysctls are the namespace's own).
	settings := []string{"net.ipv4.ip_forward=1", "net.ipv4.conf.all.send_redirects=0"}
	for _, v := range n.VNets {
		// A bridge takes its lowest port's MAC unless given one: a machine added or removed would
		// move the gateway's MAC under every machine's ARP cache, cutting them off the hub until it
		// expires. Azure's gateway answers from one fixed MAC.
		cmds = append(cmds, []string{"-n", n.Hub, "link", "add", v.Bridge, "address", machines.AzureGatewayMAC, "type", "bridge"}, []string{"-n", n.Hub, "link", "set", v.Bridge, "up"})
		for _, gw := range v.Gateways {
			cmds = append(cmds, []string{"-n", n.Hub, "addr", "add", gw.String(), "dev", v.Bridge})
		}
		conf := "net.ipv4.conf." + v.Bridge + "."
		settings = append(settings, conf+"send_redirects=0", conf+"proxy_arp=1", conf+"proxy_arp_pvlan=1")
	}
	for _, a := range n.Extra {
		cmds = append(cmds, []string{"-n", n.Hub, "addr", "add", a.String() + "/32", "dev", n.VNets[0].Bridge})
	}
	for _, args := range cmds {
		if err := ip(args...); err != nil {
			return err
		}
	}
	if out, err := exec.Command("ip", append([]string{"netns", "exec", n.Hub, "sysctl", "-qw"}, settings...)...).CombinedOutput(); err != nil {
		return fmt.Errorf("configure the hub %s: %v: %s", n.Hub, err, out)
	}
	return nil
}

// attach gives machine i its namespace, joined to an isolated port of its VNet's bridge, with addr
// and mac on eth0 and a default route through its subnet's gateway; the hub routes each of podIPs
// (the NIC's secondary IPs) to addr.
func (n *bootNetwork) attach(i int, addr netip.Prefix, mac string, podIPs []string) error {
	ns := n.machineNetns(i)
	v, gw, ok := n.subnetOf(addr.Addr())
	if !ok {
		return fmt.Errorf("boot network: %s is in no subnet of %v", addr, n.VNets)
	}
	hubSide := fmt.Sprintf("cfv%d", i)
	for _, args := range [][]string{
		{"netns", "add", ns},
		{"link", "add", hubSide, "netns", n.Hub, "type", "veth", "peer", "name", "eth0", "address", mac, "netns", ns},
		{"-n", n.Hub, "link", "set", hubSide, "master", v.Bridge},
		{"-n", n.Hub, "link", "set", hubSide, "type", "bridge_slave", "isolated", "on"},
		{"-n", n.Hub, "link", "set", hubSide, "up"},
		{"-n", ns, "link", "set", "lo", "up"},
		{"-n", ns, "addr", "add", addr.String(), "dev", "eth0"},
		{"-n", ns, "link", "set", "eth0", "up"},
		{"-n", ns, "route", "add", "default", "via", gw.String()},
	} {
		if err := ip(args...); err != nil {
			return err
		}
	}
	if len(podIPs) == 0 {
		return nil
	}
	var routes strings.Builder
	for _, p := range podIPs {
		fmt.Fprintf(&routes, "route add %s/32 via %s dev %s\n", p, addr.Addr(), v.Bridge)
	}
	if err := ipBatch(n.Hub, routes.String()); err != nil {
		return fmt.Errorf("route %s's pod IPs: %w", ns, err)
	}
	return nil
}

// ipBatch runs `ip` commands, one per line of script, in namespace ns.
func ipBatch(ns, script string) error {
	cmd := exec.Command("ip", "-n", ns, "-batch", "-")
	cmd.Stdin = strings.NewReader(script)
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("ip -n %s -batch: %v: %s", ns, err, out)
	}
	return nil
}

// subnetOf finds the VNet and the subnet gateway of an address.
func (n *bootNetwork) subnetOf(a netip.Addr) (bootVNet, netip.Addr, bool) {
	for _, v := range n.VNets {
		for _, gw := range v.Gateways {
			if gw.Contains(a) {
				return v, gw.Addr(), true
			}
		}
	}
	return bootVNet{}, netip.Addr{}, false
}

// unpeer stops the hub forwarding between two worker VNets, as deleting their peering would (the
// hub answers "prohibited"); the returned func peers them again. The control plane's VNet cannot be
// cut: what it holds here (the load balancer frontend) is the hub's own address, which no
// forwarding rule reaches.
func (n *bootNetwork) unpeer(a, z string) (func() error, error) {
	va, okA := n.vnet(a)
	vz, okZ := n.vnet(z)
	if !okA || !okZ || a == z || va.Bridge == n.VNets[0].Bridge || vz.Bridge == n.VNets[0].Bridge {
		return nil, fmt.Errorf("unpeer %s and %s: want two worker VNets of %v", a, z, n.VNets[1:])
	}
	rules := [][]string{{"iif", va.Bridge, "to", vz.Prefix.String(), "prohibit"}, {"iif", vz.Bridge, "to", va.Prefix.String(), "prohibit"}}
	added := 0
	peer := func() error {
		var errs []error
		for _, r := range rules[:added] {
			errs = append(errs, ip(append([]string{"-n", n.Hub, "rule", "del"}, r...)...))
		}
		return errors.Join(errs...)
	}
	for _, r := range rules {
		if err := ip(append([]string{"-n", n.Hub, "rule", "add"}, r...)...); err != nil {
			return nil, errors.Join(err, peer())
		}
		added++
	}
	return peer, nil
}

// Unpeer cuts the peering of two worker VNets, by name (spec.WorkerVNet.Name), until the returned
// func restores it.
func (b *Booted) Unpeer(a, z string) (peer func() error, err error) { return b.net.unpeer(a, z) }

func (n *bootNetwork) vnet(name string) (bootVNet, bool) {
	for _, v := range n.VNets {
		if v.Name == name {
			return v, true
		}
	}
	return bootVNet{}, false
}

// removeNetworks deletes every namespace named hub or hub-*, and with them their veths and bridges.
func removeNetworks(hub string) error {
	out, err := exec.Command("ip", "netns", "list").Output()
	if err != nil {
		return fmt.Errorf("ip netns list: %w", err)
	}
	var errs []string
	for _, line := range strings.Split(string(out), "\n") {
		name, _, _ := strings.Cut(strings.TrimSpace(line), " ")
		if name == hub || strings.HasPrefix(name, hub+"-") {
			if err := ip("netns", "del", name); err != nil {
				errs = append(errs, err.Error())
			}
		}
	}
	if len(errs) > 0 {
		return fmt.Errorf("%s", strings.Join(errs, "; "))
	}
	return nil
}

func ip(args ...string) error {
	if out, err := exec.Command("ip", args...).CombinedOutput(); err != nil {
		return fmt.Errorf("ip %s: %v: %s", strings.Join(args, " "), err, strings.TrimSpace(string(out)))
	}
	return nil
}

// PodNetns is the path, from this host, of the network namespace of a pod running on a booted
// worker: the one containerd's CNI set up, seen through the machine's root.
func (b *Booted) PodNetns(ctx context.Context, node, namespace, pod string) (string, error) {
	m, err := b.Machine(node)
	if err != nil {
		return "", err
	}
	id, err := b.Exec(ctx, node, "crictl", "pods", "--namespace", namespace, "--name", pod, "--state", "ready", "--quiet")
	if err != nil {
		return "", err
	}
	if id = strings.TrimSpace(id); id == "" || strings.Contains(id, "\n") {
		return "", fmt.Errorf("%s: no single ready sandbox of pod %s/%s: %q", node, namespace, pod, id)
	}
	out, err := b.Exec(ctx, node, "crictl", "inspectp", id)
	if err != nil {
		return "", err
	}
	var sandbox struct {
		Info struct {
			RuntimeSpec struct {
				Linux struct {
					Namespaces []struct{ Type, Path string }
				}
			}
		}
	}
	if err := json.Unmarshal([]byte(out), &sandbox); err != nil {
		return "", fmt.Errorf("crictl inspectp %s: %w", id, err)
	}
	for _, ns := range sandbox.Info.RuntimeSpec.Linux.Namespaces {
		if ns.Type == "network" && ns.Path != "" {
			b.mu.Lock()
			leader := m.PID
			b.mu.Unlock()
			// The machine's /var/run is a link to /run, which this host must not follow itself.
			return fmt.Sprintf("/proc/%d/root/run/%s", leader, strings.TrimPrefix(strings.TrimPrefix(ns.Path, "/var/run/"), "/run/")), nil
		}
	}
	return "", fmt.Errorf("%s: pod %s/%s has no network namespace", node, namespace, pod)
}

// MachineNetns is the path of a machine's network namespace, which outlives its restarts: where
// a test opens a listener the machine reaches on its own loopback.
func (b *Booted) MachineNetns(name string) (string, error) {
	m, err := b.Machine(name)
	if err != nil {
		return "", err
	}
	return netnsPath(b.net.machineNetns(m.index)), nil
}

// RouteReport is how the hub forwards a packet from one address to another and back, with its
// policy rules: what a data-plane check prints when a packet did not arrive.
func (b *Booted) RouteReport(from, to string) string {
	var out strings.Builder
	hub := b.net.Hub
	run := func(args ...string) {
		got, err := exec.Command("ip", append([]string{"-n", hub}, args...)...).CombinedOutput()
		fmt.Fprintf(&out, "ip %s: %s", strings.Join(args, " "), got)
		if err != nil {
			fmt.Fprintf(&out, " (%v)\n", err)
		}
	}
	run("rule", "show")
	for _, pair := range [][2]string{{from, to}, {to, from}} {
		src, err := netip.ParseAddr(pair[0])
		if err != nil {
			fmt.Fprintf(&out, "%q is no address\n", pair[0])
			continue
		}
		if v, _, ok := b.net.subnetOf(src); ok {
			run("route", "get", pair[1], "from", pair[0], "iif", v.Bridge)
		}
		run("route", "show", pair[1]+"/32")
	}
	return out.String()
}
