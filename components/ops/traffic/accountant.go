package traffic

import (
	"context"
	"fmt"
	"net/http"
	"net/netip"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/clusterforge/clusterforge/components/wellknown"
)

// Accountant keeps the counters in step with the node's pods and serves them.
type Accountant struct {
	Counters *Counters
	// CNIResults is the CNI cache directory the pods are read from. Default wellknown.CNIResultsDir.
	CNIResults string

	mu   sync.Mutex
	pods []Pod
}

// Refresh reads the node's pods and makes the table count exactly their addresses.
func (a *Accountant) Refresh() error {
	dir := a.CNIResults
	if dir == "" {
		dir = wellknown.CNIResultsDir
	}
	pods, err := CachedPods(dir)
	if err != nil {
		return fmt.Errorf("pods from %s: %w", dir, err)
	}
	ips := make([]netip.Addr, len(pods))
	for i, p := range pods {
		ips[i] = p.IP
	}
	if err := a.Counters.Sync(ips); err != nil {
		return err
	}
	a.mu.Lock()
	a.pods = pods
	a.mu.Unlock()
	return nil
}

// Run refreshes every period until ctx ends; a failed refresh is logged and retried.
func (a *Accountant) Run(ctx context.Context, every time.Duration, logf func(string, ...any)) {
	for {
		if err := a.Refresh(); err != nil {
			logf("traffic: %v", err)
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(every):
		}
	}
}

// directionLabel is the metric's direction label, as node-exporter spells them.
var directionLabel = map[Direction]string{Transmit: "transmit", Receive: "receive"}

// ServeHTTP writes the counters of the pods last refreshed in Prometheus' text format.
func (a *Accountant) ServeHTTP(w http.ResponseWriter, _ *http.Request) {
	bytes, err := a.Counters.ByAddress()
	if err != nil {
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return
	}
	a.mu.Lock()
	pods := slices.Clone(a.pods)
	a.mu.Unlock()
	slices.SortFunc(pods, func(x, y Pod) int {
		return strings.Compare(x.Namespace+"/"+x.Name, y.Namespace+"/"+y.Name)
	})
	w.Header().Set("Content-Type", "text/plain; version=0.0.4")
	fmt.Fprintf(w, "# HELP %s Bytes of IPv4 packets a pod on this node sent (transmit) or was sent (receive), as nftables counts them.\n", wellknown.PodNetworkBytesMetric)
	fmt.Fprintf(w, "# TYPE %s counter\n", wellknown.PodNetworkBytesMetric)
	for _, p := range pods {
		counted, ok := bytes[p.IP]
		if !ok {
			continue // its counters are made at the next refresh
		}
		for _, d := range []Direction{Transmit, Receive} {
			fmt.Fprintf(w, "%s{namespace=%q,pod=%q,direction=%q} %d\n", wellknown.PodNetworkBytesMetric, p.Namespace, p.Name, directionLabel[d], counted[d])
		}
	}
}
