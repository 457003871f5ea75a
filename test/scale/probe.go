package scale

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
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

// ProbeKey is the main etcd key the write probe puts, beside the apiserver's /registry.
const ProbeKey = "/clusterforge-bench/probe"

// ProbeCommand is the subcommand that runs the write probe in a process of its own (ProbeMain).
const ProbeCommand = "etcd-probe"

// probeValue is the size of a node's Lease object in etcd, which the probe stands for.
var probeValue = strings.Repeat("l", 320)

// ProbeSample is one write: when it was sent, how long it took to be acknowledged or to fail
// (a failure counts in the latencies with the time it took, at least the 5 s timeout when etcd
// does not answer).
type ProbeSample struct {
	At      time.Time     `json:"at"`
	Latency time.Duration `json:"latencyNanoseconds"`
	Failed  bool          `json:"failed,omitempty"`
}

// RunProbe writes to the main etcd ten times a second until ctx ends, timing each write with the
// clock's resolution (etcd's own histograms have buckets too coarse, …, 8, 16, 32 ms, to tell a
// 1.2 ratio), and appends each sample to w as a line of JSON.
func RunProbe(ctx context.Context, cli *clientv3.Client, w io.Writer) error {
	var werr error
	every(ctx, 100*time.Millisecond, func() {
		wctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		defer cancel()
		began := time.Now()
		_, err := cli.Put(wctx, ProbeKey, probeValue)
		line, _ := json.Marshal(ProbeSample{At: began, Latency: time.Since(began), Failed: err != nil})
		if _, err := w.Write(append(line, '\n')); err != nil && werr == nil {
			werr = err
		}
	})
	return werr
}

// ProbeMain is `etcd-probe`: RunProbe in a process of its own beside the main etcd, so that the
// load generator's garbage collection and goroutines do not stretch the probe's timings, until
// SIGTERM.
func ProbeMain(args []string) error {
	fs := flag.NewFlagSet(ProbeCommand, flag.ContinueOnError)
	endpoint := fs.String("endpoint", "", "the main etcd member's client URL")
	var tlsInfo transport.TLSInfo
	fs.StringVar(&tlsInfo.TrustedCAFile, "cacert", "", "the CA of etcd's serving certificates")
	fs.StringVar(&tlsInfo.CertFile, "cert", "", "client certificate")
	fs.StringVar(&tlsInfo.KeyFile, "key", "", "client key")
	out := fs.String("out", "", "file the samples are appended to, a line of JSON each")
	if err := fs.Parse(args); err != nil {
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
	return errors.Join(RunProbe(ctx, cli, f), f.Close())
}

// Probe reads the samples a probe process appends to a file.
type Probe struct {
	path string

	mu      sync.Mutex
	read    int64 // bytes of whole lines parsed
	samples []ProbeSample
	err     error
}

// ReadProbe reads the samples appended to path as they come.
func ReadProbe(path string) *Probe { return &Probe{path: path} }

// Between is the probe's samples sent in [from, to).
func (p *Probe) Between(from, to time.Time) []ProbeSample {
	p.mu.Lock()
	defer p.mu.Unlock()
	if err := p.load(); err != nil && p.err == nil {
		p.err = err
	}
	var out []ProbeSample
	for _, s := range p.samples {
		if !s.At.Before(from) && s.At.Before(to) {
			out = append(out, s)
		}
	}
	return out
}

// Err is the first error reading the samples.
func (p *Probe) Err() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.err
}

// load parses the whole lines appended since the last call; a line still being written waits.
func (p *Probe) load() error {
	f, err := os.Open(p.path)
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
		var s ProbeSample
		if err := json.Unmarshal(line, &s); err != nil {
			return fmt.Errorf("%s at byte %d: %w", p.path, p.read, err)
		}
		p.samples, p.read = append(p.samples, s), p.read+int64(len(line))
	}
}

// P99 is the samples' 99th percentile latency in seconds (NaN for none).
func P99(samples []ProbeSample) float64 {
	secs := make([]float64, len(samples))
	for i, s := range samples {
		secs[i] = s.Latency.Seconds()
	}
	return QuantileOverTime(0.99, secs)
}
