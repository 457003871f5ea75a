package lb

import (
	"context"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"sync"
	"syscall"
	"testing"
	"time"
)

// Probes of several backends change their health at once, and each change rewrites the state
// file: however the writes interleave, the file left is the state as it is now.
func TestConcurrentHealthChangesLeaveAReadableStateFile(t *testing.T) {
	lb := &LoadBalancer{StateFile: filepath.Join(t.TempDir(), "lb.json"), Failures: 1,
		healthy: map[string]bool{}, failed: map[string]int{}}
	for i := range 8 {
		lb.Backends = append(lb.Backends, fmt.Sprintf("10.0.0.%d:6443", i))
	}
	for round := range 200 {
		var wg sync.WaitGroup
		for _, b := range lb.Backends {
			wg.Add(1)
			go func() { defer wg.Done(); lb.record(b, round%2 == 0) }()
		}
		wg.Wait()
		state, err := ReadState(lb.StateFile)
		if err != nil {
			t.Fatalf("round %d: %v", round, err)
		}
		for _, s := range state {
			if s.Healthy != (round%2 == 0) {
				t.Fatalf("round %d: the state file says %s healthy=%v after every backend became %v", round, s.Address, s.Healthy, round%2 == 0)
			}
		}
	}
}

// A load balancer out of file descriptors refuses connections while it is, and serves again
// once it has some: the scale benchmark's event storm once ran it out, and it exited.
func TestAcceptOutOfFilesServesAgain(t *testing.T) {
	backend := echoServer(t)
	real, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ln := &exhausted{Listener: real, failures: 3}
	lb := &LoadBalancer{Backends: []string{backend}, healthy: map[string]bool{backend: true}}
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() { done <- lb.accept(ctx, ln) }()
	defer func() { cancel(); real.Close(); <-done }()

	if err := echo(real.Addr().String()); err != nil {
		select {
		case err := <-done:
			done <- err // for the deferred wait
			t.Fatalf("the load balancer stopped accepting after running out of files: %v", err)
		default:
		}
		t.Fatalf("echo through the load balancer: %v", err)
	}
}

// exhausted fails its first accepts as a process out of file descriptors does.
type exhausted struct {
	net.Listener
	failures int
}

func (e *exhausted) Accept() (net.Conn, error) {
	if e.failures > 0 {
		e.failures--
		return nil, &net.OpError{Op: "accept", Net: "tcp", Err: os.NewSyscallError("accept4", syscall.EMFILE)}
	}
	return e.Listener.Accept()
}

// A backend that stops listening still gets new connections until the probe marks it down, and
// they fail, as Azure's load balancer sends a new flow to the backend its probe last saw healthy;
// once it is marked down every connection reaches the other backend.
func TestADeadBackendFailsItsConnectionsUntilProbedDown(t *testing.T) {
	alive := echoServer(t)
	gone, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	dead := gone.Addr().String()
	gone.Close()
	front, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	lb := &LoadBalancer{Backends: []string{alive, dead}, Failures: 1, StateFile: filepath.Join(t.TempDir(), "lb.json"),
		healthy: map[string]bool{alive: true, dead: true}, failed: map[string]int{}}
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() { done <- lb.accept(ctx, front) }()
	defer func() { cancel(); front.Close(); <-done }()

	echoes := func() (ok, failed int) {
		for range 4 {
			if echo(front.Addr().String()) == nil {
				ok++
			} else {
				failed++
			}
		}
		return ok, failed
	}
	if ok, failed := echoes(); ok != 2 || failed != 2 {
		t.Errorf("before the probe: %d of 4 connections echoed, %d failed; want half to the dead backend, failing", ok, failed)
	}
	lb.record(dead, false)
	if ok, failed := echoes(); ok != 4 {
		t.Errorf("after the probe marked the dead backend down: %d of 4 connections echoed, %d failed", ok, failed)
	}
}

// echoServer is a backend that echoes what it reads, until the test ends.
func echoServer(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			conn, err := ln.Accept()
			if err != nil {
				return
			}
			go func() { defer conn.Close(); _, _ = io.Copy(conn, conn) }()
		}
	}()
	return ln.Addr().String()
}

// echo sends a word through addr and expects it back.
func echo(addr string) error {
	conn, err := net.DialTimeout("tcp", addr, 5*time.Second)
	if err != nil {
		return err
	}
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(10 * time.Second))
	if _, err := conn.Write([]byte("ping")); err != nil {
		return err
	}
	got := make([]byte, 4)
	if _, err := io.ReadFull(conn, got); err != nil {
		return err
	}
	if string(got) != "ping" {
		return fmt.Errorf("echoed %q", got)
	}
	return nil
}
