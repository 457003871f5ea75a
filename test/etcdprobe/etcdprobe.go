// Package etcdprobe is the scale benchmark's write probe of the main etcd, in a process of its
// own beside it (`<self> etcd-probe`), and the reader of what it records.
package etcdprobe

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/signal"
	"strings"
	"sync"
	"syscall"
	"time"

	"go.etcd.io/etcd/client/pkg/v3/transport"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
)

// Key is the main etcd key the probe puts, beside the apiserver's /registry.
const Key = "/clusterforge-bench/probe"

// Command is the subcommand that runs the probe in a process of its own (Main).
const Command = "etcd-probe"

// Timeout bounds a write: one etcd does not answer counts with this latency.
const Timeout = 5 * time.Second

// value is the size of a node's Lease object in etcd, which the probe stands for.
var value = strings.Repeat("l", 320)

// Sample is one write: when it was sent, how long it took to be acknowledged or to fail (a
// failure counts in the latencies with the time it took, at most Timeout).
type Sample struct {
	At      time.Time     `json:"at"`
	Latency time.Duration `json:"latencyNanoseconds"`
	Failed  bool          `json:"failed,omitempty"`
}

// Run writes to the main etcd ten times a second until ctx ends, timing each write with the
// clock's resolution (etcd's own histograms have buckets too coarse, …, 8, 16, 32 ms, to tell a
// 1.2 ratio), and appends each sample to w as a line of JSON. A write waits for the one before.
func Run(ctx context.Context, cli *clientv3.Client, w io.Writer) error {
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-tick.C:
		}
		wctx, cancel := context.WithTimeout(ctx, Timeout)
		began := time.Now()
		_, err := cli.Put(wctx, Key, value)
		cancel()
		line, _ := json.Marshal(Sample{At: began, Latency: time.Since(began), Failed: err != nil})
		if _, err := w.Write(append(line, '\n')); err != nil {
			return err
		}
	}
}

// Main is `etcd-probe`: Run in a process of its own beside the main etcd, so that the load
// generator's garbage collection and goroutines do not stretch the probe's timings, until SIGTERM.
func Main(args []string) error {
	flags := flag.NewFlagSet(Command, flag.ContinueOnError)
	endpoint := flags.String("endpoint", "", "the main etcd member's client URL")
	var tlsInfo transport.TLSInfo
	flags.StringVar(&tlsInfo.TrustedCAFile, "cacert", "", "the CA of etcd's serving certificates")
	flags.StringVar(&tlsInfo.CertFile, "cert", "", "client certificate")
	flags.StringVar(&tlsInfo.KeyFile, "key", "", "client key")
	out := flags.String("out", "", "file the samples are appended to, a line of JSON each")
	if err := flags.Parse(args); err != nil {
		return err
	}
	if *endpoint == "" || *out == "" {
		return errors.New("etcd-probe: --endpoint and --out are required")
	}
	tc, err := tlsInfo.ClientConfig()
	if err != nil {
		return err
	}
	cli, err := clientv3.New(clientv3.Config{Endpoints: []string{*endpoint}, TLS: tc, DialTimeout: 2 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		return err
	}
	defer cli.Close()
	f, err := os.OpenFile(*out, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	return errors.Join(Run(ctx, cli, f), f.Close())
}

// Reader reads the samples a probe process appends to a file.
type Reader struct {
	path string

	mu      sync.Mutex
	read    int64 // bytes of whole lines parsed
	samples []Sample
	err     error
}

// Read reads the samples appended to path as they come.
func Read(path string) *Reader { return &Reader{path: path} }

// Between is the probe's samples sent in [from, to).
func (p *Reader) Between(from, to time.Time) []Sample {
	p.mu.Lock()
	defer p.mu.Unlock()
	if err := p.load(); err != nil && p.err == nil {
		p.err = err
	}
	var out []Sample
	for _, s := range p.samples {
		if !s.At.Before(from) && s.At.Before(to) {
			out = append(out, s)
		}
	}
	return out
}

// Through waits until the probe has recorded every write sent before t: until a write sent at
// or after t is recorded, or a write's Timeout has passed since t, whichever is first. A phase
// read at once would miss its slowest writes, still under way when it ended.
func (p *Reader) Through(ctx context.Context, t time.Time) {
	for time.Now().Before(t.Add(Timeout + time.Second)) {
		if len(p.Between(t, t.Add(time.Hour))) > 0 {
			return
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// Err is the first error reading the samples.
func (p *Reader) Err() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.err
}

// load parses the whole lines appended since the last call; a line still being written waits,
// and a file not written yet holds no samples.
func (p *Reader) load() error {
	f, err := os.Open(p.path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	defer f.Close()
	if _, err := f.Seek(p.read, io.SeekStart); err != nil {
		return err
	}
	r := bufio.NewReader(f)
	for {
		line, err := r.ReadBytes('\n')
		if err == io.EOF {
			return nil
		}
		if err != nil {
			return err
		}
		var s Sample
		if err := json.Unmarshal(line, &s); err != nil {
			return fmt.Errorf("%s at byte %d: %w", p.path, p.read, err)
		}
		p.samples, p.read = append(p.samples, s), p.read+int64(len(line))
	}
}
