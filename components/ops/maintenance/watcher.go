package maintenance

import (
	"context"
	"fmt"
	"net/http"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/clusterforge/clusterforge/components/nodestatus"
)

// Watcher runs on every node (in the node agent's pod): it polls this machine's metadata service,
// which costs the apiservers nothing, and writes its own node's MaintenanceScheduled condition
// only when it changes (L07, L37).
type Watcher struct {
	Client   kubernetes.Interface
	NodeName string
	// VMName is the name scheduled events use for this VM: for a scale-set instance
	// "<scale set>_<instance id>" (the metadata service's compute/name).
	VMName string
	// Endpoint is the metadata service's base URL, http://169.254.169.254.
	Endpoint string
	HTTP     *http.Client
	// Every is the poll period; Azure posts events at least 5 minutes (15 for redeploys) ahead.
	Every time.Duration
	Logf  func(format string, args ...any)

	last corev1.NodeCondition
}

// Run polls until ctx ends; a failed poll is logged and retried at the next tick.
func (w *Watcher) Run(ctx context.Context) error {
	t := time.NewTicker(w.Every)
	defer t.Stop()
	for {
		if err := w.Poll(ctx); err != nil && w.Logf != nil {
			w.Logf("scheduled events: %v", err)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-t.C:
		}
	}
}

// Poll reads the events once and updates the node's condition if it changed.
func (w *Watcher) Poll(ctx context.Context) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, w.Endpoint+Path, nil)
	if err != nil {
		return err
	}
	req.Header.Set("Metadata", "true")
	resp, err := w.HTTP.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("%s: %s", Path, resp.Status)
	}
	doc, err := Parse(resp.Body)
	if err != nil {
		return err
	}
	c := ConditionFor(doc, w.VMName, time.Now())
	if c.Status == w.last.Status && c.Reason == w.last.Reason && c.Message == w.last.Message {
		return nil
	}
	if err := nodestatus.SetCondition(ctx, w.Client, w.NodeName, c); err != nil {
		return err
	}
	w.last = c
	if w.Logf != nil {
		w.Logf("node %s: %s=%s %s", w.NodeName, c.Type, c.Status, c.Message)
	}
	return nil
}
