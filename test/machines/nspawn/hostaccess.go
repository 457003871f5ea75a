package nspawn

import (
	"context"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"time"

	"k8s.io/client-go/tools/clientcmd"

	"github.com/clusterforge/clusterforge/components/wellknown"
	"github.com/clusterforge/clusterforge/test/machines"
)

// The booted cluster's addresses exist only in its hub namespace: from this host, the plan's
// 10.0.0.10 is whatever the host's default route reaches on the user's real network. So the host
// gets a kubeconfig of its own (HostKubeconfig) whose server is a loopback port, where a forwarder
// running on this host dials the load balancer from inside the hub.

// hostAPIServerName is the name the host's kubeconfig checks the apiserver certificate for: the
// certificate carries it (pki's apiserver profile), and no address the host can reach.
const hostAPIServerName = "kubernetes"

// HostKubeconfig is the admin's kubeconfig for this host: the booted load balancer through the
// loopback forwarder.
func (b *Booted) HostKubeconfig() string { return filepath.Join(b.Dir, "kubeconfig-host") }

func (b *Booted) forwarderAddressFile() string { return filepath.Join(b.Dir, "forward.addr") }

// startHostAccess starts the forwarder on a free loopback port and writes HostKubeconfig.
func (b *Booted) startHostAccess(ctx context.Context) error {
	_ = os.Remove(b.forwarderAddressFile())
	argv := append(slices.Clone(b.Self), "forward", "--listen=127.0.0.1:0", "--address-file="+b.forwarderAddressFile(),
		"--netns="+netnsPath(b.net.Hub), "--to="+net.JoinHostPort(b.Cluster.Network.APIServerIP, strconv.Itoa(wellknown.APIServerPort)))
	proc, err := machines.SpawnProcess(argv, os.Environ(), b.Dir, filepath.Join(b.LogDir(), "forward.log"), false)
	if err != nil {
		return fmt.Errorf("start the host forwarder: %w", err)
	}
	proc.Role, proc.Machine, proc.Name = "platform", "host", "forward"
	if err := b.track(proc); err != nil {
		return err
	}
	var addr []byte
	if err := machines.Poll(ctx, 10*time.Second, "the host forwarder's address", func(context.Context) (err error) {
		addr, err = os.ReadFile(b.forwarderAddressFile())
		return err
	}); err != nil {
		return err
	}
	cfg, err := clientcmd.LoadFromFile(b.Kubeconfig())
	if err != nil {
		return err
	}
	for _, cluster := range cfg.Clusters {
		cluster.Server = "https://" + string(addr)
		cluster.TLSServerName = hostAPIServerName
	}
	if err := clientcmd.WriteToFile(*cfg, b.HostKubeconfig()); err != nil {
		return err
	}
	b.logf("host access: %s (the load balancer through 127.0.0.1, certificate checked for %q)", b.HostKubeconfig(), hostAPIServerName)
	return nil
}
