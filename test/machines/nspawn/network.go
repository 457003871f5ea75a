package nspawn

import (
	"context"
	"encoding/json"
	"fmt"
	"net/netip"
	"os/exec"
	"strings"
)

// bootNetwork is the network `make boot` makes (deviation "network"): a hub namespace with a
// bridge that stands for the spoke VNet (the subnets' gateways, the load balancer frontend and the
// instance metadata address are on it), and one namespace per machine joined to the bridge by a
// veth pair, its eth0 configured before the machine starts, as Azure's DHCP would have it. As in
// the VNet, machines never meet at layer 2: the bridge's ports are isolated and the hub answers
// every ARP request (proxy ARP) and routes each packet, pod IPs to the worker whose NIC holds them.
// Nothing is routed out of the hub: every packet stays in these namespaces.
type bootNetwork struct {
	// Hub is the hub namespace's name, cfboot-<env>.
	Hub string
	// Gateways are the subnets' first addresses, on the bridge, with their prefix length.
	Gateways []netip.Prefix
	// Extra are single addresses on the bridge: the load balancer frontend and the metadata service.
	Extra []netip.Addr
}

// hubBridge is the bridge in the hub namespace.
const hubBridge = "br0"

// netnsPath is where `ip netns` keeps a named namespace.
func netnsPath(name string) string { return "/run/netns/" + name }

// machineNetns names machine i's namespace.
func (n *bootNetwork) machineNetns(i int) string { return fmt.Sprintf("%s-m%d", n.Hub, i) }

// create makes the hub namespace and its bridge.
func (n *bootNetwork) create() error {
	cmds := [][]string{
		{"netns", "add", n.Hub},
		{"-n", n.Hub, "link", "set", "lo", "up"},
		{"-n", n.Hub, "link", "add", hubBridge, "type", "bridge"},
		{"-n", n.Hub, "link", "set", hubBridge, "up"},
	}
	for _, gw := range n.Gateways {
		cmds = append(cmds, []string{"-n", n.Hub, "addr", "add", gw.String(), "dev", hubBridge})
	}
	for _, a := range n.Extra {
		cmds = append(cmds, []string{"-n", n.Hub, "addr", "add", a.String() + "/32", "dev", hubBridge})
	}
	for _, args := range cmds {
		if err := ip(args...); err != nil {
			return err
		}
	}
	// The hub routes between the subnets and answers ARP for every address, back out of the port
	// the request came in (proxy_arp_pvlan), with no redirect to a machine it isolates (these
	// sysctls are the namespace's own).
	settings := []string{"net.ipv4.ip_forward=1", "net.ipv4.conf.all.send_redirects=0", "net.ipv4.conf." + hubBridge + ".send_redirects=0",
		"net.ipv4.conf." + hubBridge + ".proxy_arp=1", "net.ipv4.conf." + hubBridge + ".proxy_arp_pvlan=1"}
	if out, err := exec.Command("ip", append([]string{"netns", "exec", n.Hub, "sysctl", "-qw"}, settings...)...).CombinedOutput(); err != nil {
		return fmt.Errorf("configure the hub %s: %v: %s", n.Hub, err, out)
	}
	return nil
}

// attach gives machine i its namespace, joined to an isolated port of the bridge, with addr and
// mac on eth0 and a default route through its subnet's gateway; the hub routes each of podIPs
// (the NIC's secondary IPs) to addr.
func (n *bootNetwork) attach(i int, addr netip.Prefix, mac string, podIPs []string) error {
	ns := n.machineNetns(i)
	gw, ok := n.gatewayOf(addr.Addr())
	if !ok {
		return fmt.Errorf("boot network: %s is in no subnet of %v", addr, n.Gateways)
	}
	hubSide := fmt.Sprintf("cfv%d", i)
	for _, args := range [][]string{
		{"netns", "add", ns},
		{"link", "add", hubSide, "netns", n.Hub, "type", "veth", "peer", "name", "eth0", "address", mac, "netns", ns},
		{"-n", n.Hub, "link", "set", hubSide, "master", hubBridge},
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
		fmt.Fprintf(&routes, "route add %s/32 via %s dev %s\n", p, addr.Addr(), hubBridge)
	}
	cmd := exec.Command("ip", "-n", n.Hub, "-batch", "-")
	cmd.Stdin = strings.NewReader(routes.String())
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("route %s's pod IPs in %s: %v: %s", ns, n.Hub, err, out)
	}
	return nil
}

func (n *bootNetwork) gatewayOf(a netip.Addr) (netip.Addr, bool) {
	for _, gw := range n.Gateways {
		if gw.Contains(a) {
			return gw.Addr(), true
		}
	}
	return netip.Addr{}, false
}

// removeNetworks deletes every namespace named hub or hub-*, and with them their veths and bridge.
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
