package rehearsal

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log"
	"net"
	"os"
	"os/signal"
	"path/filepath"
	"slices"
	"strconv"
	"syscall"
	"time"

	"k8s.io/client-go/tools/clientcmd"

	"github.com/clusterforge/clusterforge/components/wellknown"
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
	proc, err := spawn(argv, os.Environ(), b.Dir, filepath.Join(b.logDir(), "forward.log"), false)
	if err != nil {
		return fmt.Errorf("start the host forwarder: %w", err)
	}
	proc.Role, proc.Machine, proc.Name = "platform", "host", "forward"
	b.mu.Lock()
	b.services = append(b.services, proc)
	err = writeEndpoints(b.EndpointsFile(), b.services)
	b.mu.Unlock()
	if err != nil {
		return err
	}
	var addr []byte
	if err := poll(ctx, 10*time.Second, "the host forwarder's address", func(context.Context) (err error) {
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

// ForwardMain runs the forwarder until SIGTERM: `rehearse forward ...`. It listens on this host
// and opens each connection's other end from inside the network namespace --netns.
func ForwardMain(args []string) error {
	fs := flag.NewFlagSet("forward", flag.ContinueOnError)
	listen := fs.String("listen", "127.0.0.1:0", "loopback host:port to accept on")
	addressFile := fs.String("address-file", "", "file to write the address listened on to, once listening")
	netns := fs.String("netns", "", "path of the network namespace to dial from")
	to := fs.String("to", "", "host:port to dial in that namespace")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if host, _, err := net.SplitHostPort(*listen); err != nil || !net.ParseIP(host).IsLoopback() {
		return fmt.Errorf("forward: --listen %q: only a loopback address", *listen)
	}
	if *netns == "" || *to == "" {
		return errors.New("forward: --netns and --to are required")
	}
	ln, err := net.Listen("tcp", *listen)
	if err != nil {
		return err
	}
	if *addressFile != "" {
		if err := os.WriteFile(*addressFile, []byte(ln.Addr().String()), 0o644); err != nil {
			return err
		}
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stop()
	go func() { <-ctx.Done(); ln.Close() }()
	dial := DialerIn(*netns)
	log.Printf("forwarding %s to %s in %s", ln.Addr(), *to, *netns)
	for {
		conn, err := ln.Accept()
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			return err
		}
		go func() {
			defer conn.Close()
			dctx, cancel := context.WithTimeout(ctx, 10*time.Second)
			upstream, err := dial(dctx, "tcp", *to)
			cancel()
			if err != nil {
				log.Printf("dial %s: %v", *to, err)
				return
			}
			defer upstream.Close()
			done := make(chan struct{}, 2)
			go func() { _, _ = io.Copy(upstream, conn); done <- struct{}{} }()
			go func() { _, _ = io.Copy(conn, upstream); done <- struct{}{} }()
			<-done
		}()
	}
}
