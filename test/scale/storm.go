package scale

import (
	"context"
	"fmt"
	"strings"
	"sync/atomic"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/clusterforge/clusterforge/test/etcdprobe"
	"github.com/clusterforge/clusterforge/test/openloop"
)

// Storm creates Events at a rate, as kubelets report their pods' trouble (the nodes' identity):
// each a 1 KiB message about one of 5,000 pods spread over StormNamespaces namespaces, from one
// of the nodes, open-loop, up to stormInFlight at once.
type Storm struct {
	*openloop.Loop
	created, failed, throttled atomic.Int64
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
	s.Loop = openloop.Start(ctx, func() float64 { return perSecond }, stormInFlight, func(n int) {
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
	})
	return s
}

// Counts are the events created, refused with 429 and failed otherwise.
func (s *Storm) Counts() (created, throttled, failed int64) {
	return s.created.Load(), s.throttled.Load(), s.failed.Load()
}

// P99 is the probe samples' 99th percentile latency in seconds (NaN for none).
func P99(samples []etcdprobe.Sample) float64 {
	secs := make([]float64, len(samples))
	for i, s := range samples {
		secs[i] = s.Latency.Seconds()
	}
	return QuantileOverTime(0.99, secs)
}
