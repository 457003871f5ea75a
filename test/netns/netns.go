package netns

import (
	"context"
	"fmt"
	"net"
	"net/netip"
	"os"
	"runtime"

	"golang.org/x/sys/unix"
)

// inNetns runs f on a thread that has entered the network namespace at path. The thread is never
// returned to the runtime (it exits with the goroutine), so no other goroutine runs in that
// namespace by accident. Sockets f opens stay in the namespace.
func inNetns(path string, f func() error) error {
	done := make(chan error, 1)
	go func() {
		runtime.LockOSThread() // never unlocked, on purpose
		ns, err := os.Open(path)
		if err != nil {
			done <- err
			return
		}
		defer ns.Close()
		if err := unix.Setns(int(ns.Fd()), unix.CLONE_NEWNET); err != nil {
			done <- fmt.Errorf("enter %s: %w", path, err)
			return
		}
		done <- f()
	}()
	return <-done
}

// DialerIn opens connections from inside the network namespace at path: how this process's clients
// reach machines that have no route to it.
func DialerIn(path string) func(ctx context.Context, network, addr string) (net.Conn, error) {
	return func(ctx context.Context, network, addr string) (conn net.Conn, err error) {
		err = inNetns(path, func() (err error) {
			conn, err = (&net.Dialer{}).DialContext(ctx, network, addr)
			return err
		})
		return conn, err
	}
}

// ListenerIn listens on addr in the network namespace at path: a socket of that namespace, which
// accepts from any thread.
func ListenerIn(path, network, addr string) (l net.Listener, err error) {
	err = inNetns(path, func() (err error) {
		l, err = net.Listen(network, addr)
		return err
	})
	return l, err
}

// Resolving dials through dial, resolving a host name first at the DNS server at server (host:port),
// asked through dial too: a namespace's client resolving as its resolv.conf would have it.
func Resolving(dial func(ctx context.Context, network, addr string) (net.Conn, error), server string) func(ctx context.Context, network, addr string) (net.Conn, error) {
	resolver := &net.Resolver{PreferGo: true, Dial: func(ctx context.Context, network, _ string) (net.Conn, error) {
		return dial(ctx, network, server)
	}}
	return func(ctx context.Context, network, addr string) (net.Conn, error) {
		host, port, err := net.SplitHostPort(addr)
		if err != nil {
			return nil, err
		}
		if _, err := netip.ParseAddr(host); err == nil {
			return dial(ctx, network, addr)
		}
		addrs, err := resolver.LookupNetIP(ctx, "ip4", host)
		if err != nil {
			return nil, err
		}
		return dial(ctx, network, net.JoinHostPort(addrs[0].String(), port))
	}
}
