// Package lb stands in for Azure's internal load balancer in front of the apiservers (deviation
// "load balancer").
package lb

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"os"
	"os/signal"
	"strings"
	"sync"
	"syscall"
	"time"
)

// LoadBalancer stands in for Azure's internal load balancer: a TCP proxy that sends each new
// connection to one backend the probe holds healthy, in rotation, and an HTTPS health probe that
// takes a backend out after Failures failed probes in a row and puts it back after one success.
// As on Azure, a connection sent to a backend that has stopped listening fails (the client's is
// reset) until the probe marks it down: nothing retries it on another backend.
type LoadBalancer struct {
	Listen    string
	Backends  []string
	ProbePath string
	Interval  time.Duration
	Failures  int
	// StateFile receives the backends' health as JSON whenever it changes.
	StateFile string

	mu      sync.Mutex
	healthy map[string]bool
	failed  map[string]int
	next    int
	// stateMu makes the state file's writers take turns: each snapshots the health after the one
	// before it has renamed its file, so the last write holds the last state and no two share the
	// temporary file.
	stateMu sync.Mutex
}

// BackendState is one backend as the state file shows it.
type BackendState struct {
	Address string `json:"address"`
	Healthy bool   `json:"healthy"`
}

// Run serves until ctx ends.
func (lb *LoadBalancer) Run(ctx context.Context) error {
	lb.healthy, lb.failed = map[string]bool{}, map[string]int{}
	lb.writeState()
	ln, err := (&net.ListenConfig{}).Listen(ctx, "tcp", lb.Listen)
	if err != nil {
		return err
	}
	go func() { <-ctx.Done(); ln.Close() }()
	go lb.probeLoop(ctx)
	return lb.accept(ctx, ln)
}

// accept proxies each connection ln accepts until ctx ends.
func (lb *LoadBalancer) accept(ctx context.Context, ln net.Listener) error {
	for wait := time.Duration(0); ; {
		conn, err := ln.Accept()
		switch {
		case err == nil:
			wait = 0
			go lb.serve(conn)
		case ctx.Err() != nil:
			return nil
		case outOfFiles(err):
			// Azure's load balancer has no descriptors to run out of: accept nothing while there
			// are none (connections wait in the backlog), and serve again once clients let go.
			wait = min(max(2*wait, 5*time.Millisecond), time.Second)
			log.Printf("accept: %v; retrying in %s", err, wait)
			time.Sleep(wait)
		default:
			return err
		}
	}
}

// outOfFiles is an accept that failed for want of file descriptors, the process's or the system's.
func outOfFiles(err error) bool {
	return errors.Is(err, syscall.EMFILE) || errors.Is(err, syscall.ENFILE)
}

func (lb *LoadBalancer) probeLoop(ctx context.Context) {
	client := &http.Client{
		Timeout: lb.Interval,
		// Azure's probes do not verify the backend's certificate either.
		Transport: &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}, DisableKeepAlives: true},
	}
	tick := time.NewTicker(lb.Interval)
	defer tick.Stop()
	for {
		var wg sync.WaitGroup
		for _, b := range lb.Backends {
			wg.Add(1)
			go func() {
				defer wg.Done()
				// A probe this process had no descriptor for says nothing of the backend.
				if ok, err := probe(client, "https://"+b+lb.ProbePath); !outOfFiles(err) {
					lb.record(b, ok)
				}
			}()
		}
		wg.Wait()
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
	}
}

func probe(client *http.Client, url string) (bool, error) {
	resp, err := client.Get(url)
	if err != nil {
		return false, err
	}
	defer resp.Body.Close()
	_, _ = io.Copy(io.Discard, resp.Body)
	return resp.StatusCode == http.StatusOK, nil
}

func (lb *LoadBalancer) record(backend string, ok bool) {
	lb.mu.Lock()
	was := lb.healthy[backend]
	if ok {
		lb.failed[backend] = 0
		lb.healthy[backend] = true
	} else if lb.failed[backend]++; lb.failed[backend] >= lb.Failures {
		lb.healthy[backend] = false
	}
	changed := was != lb.healthy[backend]
	lb.mu.Unlock()
	if changed {
		log.Printf("backend %s healthy=%v", backend, !was)
		lb.writeState()
	}
}

// pick returns the next healthy backend in rotation, or "" when none is.
func (lb *LoadBalancer) pick() string {
	lb.mu.Lock()
	defer lb.mu.Unlock()
	for range lb.Backends {
		b := lb.Backends[lb.next%len(lb.Backends)]
		lb.next++
		if lb.healthy[b] {
			return b
		}
	}
	return ""
}

func (lb *LoadBalancer) serve(client net.Conn) {
	defer client.Close()
	b := lb.pick()
	if b == "" {
		// No healthy backend: new flows are dropped, as on Azure.
		return
	}
	backend, err := net.DialTimeout("tcp", b, 2*time.Second)
	if err != nil {
		// The flow went to a backend that does not answer: the client's connection fails with it.
		if tc, ok := client.(*net.TCPConn); ok {
			_ = tc.SetLinger(0)
		}
		return
	}
	defer backend.Close()
	done := make(chan struct{}, 2)
	pipe := func(dst, src net.Conn) {
		_, _ = io.Copy(dst, src)
		if tc, ok := dst.(*net.TCPConn); ok {
			_ = tc.CloseWrite()
		}
		done <- struct{}{}
	}
	go pipe(backend, client)
	go pipe(client, backend)
	<-done
	<-done
}

func (lb *LoadBalancer) writeState() {
	lb.stateMu.Lock()
	defer lb.stateMu.Unlock()
	lb.mu.Lock()
	state := make([]BackendState, len(lb.Backends))
	for i, b := range lb.Backends {
		state[i] = BackendState{Address: b, Healthy: lb.healthy[b]}
	}
	lb.mu.Unlock()
	data, _ := json.MarshalIndent(state, "", "  ")
	tmp := lb.StateFile + ".tmp"
	if err := os.WriteFile(tmp, data, 0o644); err == nil {
		_ = os.Rename(tmp, lb.StateFile)
	}
}

// ReadState reads the backends' health from a state file.
func ReadState(path string) ([]BackendState, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var state []BackendState
	return state, json.Unmarshal(data, &state)
}

// Main runs the load balancer from command-line flags until SIGTERM: `rehearse lb ...`.
func Main(args []string) error {
	fs := flag.NewFlagSet("lb", flag.ContinueOnError)
	lb := &LoadBalancer{}
	backends := fs.String("backends", "", "comma-separated host:port backends")
	fs.StringVar(&lb.Listen, "listen", "", "host:port to serve")
	fs.StringVar(&lb.ProbePath, "probe-path", "/readyz", "HTTPS probe path")
	fs.DurationVar(&lb.Interval, "interval", 5*time.Second, "probe interval")
	fs.IntVar(&lb.Failures, "failures", 2, "failed probes in a row that take a backend out")
	fs.StringVar(&lb.StateFile, "state", "lb.json", "file receiving the backends' health")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if lb.Listen == "" || *backends == "" {
		return fmt.Errorf("lb: --listen and --backends are required")
	}
	lb.Backends = strings.Split(*backends, ",")
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stop()
	log.Printf("listening on %s, backends %v, probe %s every %s", lb.Listen, lb.Backends, lb.ProbePath, lb.Interval)
	return lb.Run(ctx)
}
