package netns

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
	"syscall"
	"time"
)

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
