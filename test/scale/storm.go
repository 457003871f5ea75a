package scale

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
)

// ProbeKey is the main etcd key the write probe puts, beside the apiserver's /registry.
const ProbeKey = "/clusterforge-bench/probe"

// probeValue is the size of a node's Lease object in etcd, which the probe stands for.
var probeValue = strings.Repeat("l", 320)

// Probe writes to the main etcd ten times a second, timing each write with the clock's
// resolution: etcd's own histograms have buckets too coarse (…, 8, 16, 32 ms) to tell a 1.2 ratio.
type Probe struct {
	mu      sync.Mutex
	samples []ProbeSample
}

// ProbeSample is one write: when it was sent, how long it took to be acknowledged or to fail
// (a failure counts in the latencies with the time it took, at least the 5 s timeout when etcd
// does not answer).
type ProbeSample struct {
	At      time.Time
	Latency time.Duration
	Failed  bool
}

// StartProbe writes every 100 ms until ctx ends.
func StartProbe(ctx context.Context, cli *clientv3.Client) *Probe {
	p := &Probe{}
	go every(ctx, 100*time.Millisecond, func() {
		wctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		defer cancel()
		began := time.Now()
		_, err := cli.Put(wctx, ProbeKey, probeValue)
		p.mu.Lock()
		defer p.mu.Unlock()
		p.samples = append(p.samples, ProbeSample{At: began, Latency: time.Since(began), Failed: err != nil})
	})
	return p
}

// Between is the probe's samples sent in [from, to).
func (p *Probe) Between(from, to time.Time) []ProbeSample {
	p.mu.Lock()
	defer p.mu.Unlock()
	var out []ProbeSample
	for _, s := range p.samples {
		if !s.At.Before(from) && s.At.Before(to) {
			out = append(out, s)
		}
	}
	return out
}

// P99 is the samples' 99th percentile latency in seconds (NaN for none).
func P99(samples []ProbeSample) float64 {
	secs := make([]float64, len(samples))
	for i, s := range samples {
		secs[i] = s.Latency.Seconds()
	}
	return QuantileOverTime(0.99, secs)
}

// Storm creates Events at a rate, as kubelets report their pods' trouble (the nodes' identity):
// each a 1 KiB message about one of 5,000 pods spread over StormNamespaces namespaces, from one
// of the nodes. It is open-loop: each event is sent at its time whatever the earlier ones are
// waiting for, up to stormInFlight at once; an event due beyond that is counted as not sent.
type Storm struct {
	created, failed, throttled, sent, unsent atomic.Int64
}

// StormNamespaces is how many namespaces the storm's events are spread over: EventRateLimit
// limits each namespace, and a fleet's events come from many.
const StormNamespaces = 50

// stormInFlight bounds the open-loop generator's outstanding requests.
const stormInFlight = 4096

// StormEventNamespace is the i-th namespace the storm's events are in.
func StormEventNamespace(i int) string {
	return fmt.Sprintf("%s-%02d", StormNamespace, i%StormNamespaces)
}

// stormMessage is a long event message, as a failing pod's or node's events carry.
var stormMessage = strings.Repeat("storm: a node reports trouble again; ", 28)

// StartStorm creates perSecond events a second over clients until ctx ends; nodes are the
// involved objects.
func StartStorm(ctx context.Context, clients []*kubernetes.Clientset, perSecond float64, nodes []string) *Storm {
	s := &Storm{}
	slots := make(chan struct{}, stormInFlight)
	send := func(n int) {
		defer func() { <-slots }()
		cs := clients[n%len(clients)]
		ns, pod := StormEventNamespace(n), fmt.Sprintf("storm-%d", n%5000)
		ev := &corev1.Event{
			ObjectMeta:     metav1.ObjectMeta{GenerateName: pod + ".", Namespace: ns},
			InvolvedObject: corev1.ObjectReference{Kind: "Pod", Namespace: ns, Name: pod, APIVersion: "v1"},
			Reason:         "BenchmarkStorm", Message: stormMessage, Type: corev1.EventTypeWarning,
			Source:         corev1.EventSource{Component: "kubelet", Host: nodes[n%len(nodes)]},
			FirstTimestamp: metav1.Now(), LastTimestamp: metav1.Now(), Count: 1,
		}
		_, err := cs.CoreV1().Events(ns).Create(ctx, ev, metav1.CreateOptions{})
		switch {
		case err == nil:
			s.created.Add(1)
		case apierrors.IsTooManyRequests(err):
			s.throttled.Add(1)
		case ctx.Err() == nil:
			s.failed.Add(1)
		}
	}
	go func() {
		// Every 10 ms, whatever is due by the clock since the start, so that a late tick sends
		// more rather than the rate falling quietly.
		began, n := time.Now(), 0
		every(ctx, 10*time.Millisecond, func() {
			for due := int(perSecond * time.Since(began).Seconds()); n < due; n++ {
				select {
				case slots <- struct{}{}:
					s.sent.Add(1)
					go send(n)
				default: // stormInFlight outstanding: this machine cannot offer more
					s.unsent.Add(1)
				}
			}
		})
	}()
	return s
}

// Counts are the events created, refused with 429 and failed otherwise.
func (s *Storm) Counts() (created, throttled, failed int64) {
	return s.created.Load(), s.throttled.Load(), s.failed.Load()
}

// Offered counts the events sent, and those that were due while stormInFlight were outstanding.
func (s *Storm) Offered() (sent, unsent int64) { return s.sent.Load(), s.unsent.Load() }
