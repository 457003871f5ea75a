package maintenance

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"net/http"
	"slices"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/clusterforge/clusterforge/components/nodestatus"
	"github.com/clusterforge/clusterforge/components/wellknown"
)

// Watcher runs on every node (in the node agent's pod): it polls this machine's metadata service,
// which costs the apiservers nothing, and writes its own node's MaintenanceScheduled condition
// only when it changes (L07, L37). Once the remediation controller has drained the node for an
// event of this VM alone, the watcher starts the event early: the machine would otherwise sit
// empty until NotBefore (15 minutes for a redeploy, days for a predicted hardware failure).
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
	// DrainedReadEvery spaces the reads of its node while an event waits for the drain. Default
	// 30 s: a maintenance wave may schedule a fifth of the fleet at once.
	DrainedReadEvery time.Duration
	Logf             func(format string, args ...any)

	last corev1.NodeCondition
	// started are the events this watcher started; nodeReadAt is when it last read its node.
	started    map[string]bool
	nodeReadAt time.Time
}

// defaultDrainedReadEvery is DrainedReadEvery's default.
const defaultDrainedReadEvery = 30 * time.Second

// Run polls until ctx ends; a failed poll is logged and retried at the next tick.
func (w *Watcher) Run(ctx context.Context) error {
	t := time.NewTicker(w.Every)
	defer t.Stop()
	for {
		if err := w.Poll(ctx); err != nil {
			w.logf("scheduled events: %v", err)
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
	data, err := w.metadata(ctx, http.MethodGet, nil)
	if err != nil {
		return err
	}
	doc, err := Parse(bytes.NewReader(data))
	if err != nil {
		return err
	}
	c := ConditionFor(doc, w.VMName, time.Now())
	if c.Status != w.last.Status || c.Reason != w.last.Reason || c.Message != w.last.Message {
		if err := nodestatus.SetCondition(ctx, w.Client, w.NodeName, c); err != nil {
			return err
		}
		w.last = c
		w.logf("node %s: %s=%s %s", w.NodeName, c.Type, c.Status, c.Message)
	}
	return w.startIfDrained(ctx, doc)
}

// startIfDrained starts this VM's startable events once its node carries wellknown.DrainedAnnotation. The
// node is read only while such an event waits, from the apiserver's cache, and at most every
// DrainedReadEvery.
func (w *Watcher) startIfDrained(ctx context.Context, doc Document) error {
	maps.DeleteFunc(w.started, func(id string, _ bool) bool { // events over are forgotten
		return !slices.ContainsFunc(doc.Events, func(e Event) bool { return e.EventID == id })
	})
	var body StartRequests
	for _, id := range Startable(doc, w.VMName) {
		if !w.started[id] {
			body.StartRequests = append(body.StartRequests, StartRequest{EventID: id})
		}
	}
	every := w.DrainedReadEvery
	if every == 0 {
		every = defaultDrainedReadEvery
	}
	if len(body.StartRequests) == 0 || time.Since(w.nodeReadAt) < every {
		return nil
	}
	w.nodeReadAt = time.Now()
	node, err := w.Client.CoreV1().Nodes().Get(ctx, w.NodeName, metav1.GetOptions{ResourceVersion: "0"})
	if err != nil {
		return err
	}
	if _, drained := node.Annotations[wellknown.DrainedAnnotation]; !drained {
		return nil
	}
	data, err := json.Marshal(body)
	if err != nil {
		return err
	}
	if _, err := w.metadata(ctx, http.MethodPost, bytes.NewReader(data)); err != nil {
		return fmt.Errorf("start %s: %w", data, err)
	}
	if w.started == nil {
		w.started = map[string]bool{}
	}
	for _, r := range body.StartRequests {
		w.started[r.EventID] = true
		w.logf("node %s: drained, event %s started", w.NodeName, r.EventID)
	}
	return nil
}

// metadata sends one request to the Scheduled Events endpoint and returns the answer's body.
func (w *Watcher) metadata(ctx context.Context, method string, body io.Reader) ([]byte, error) {
	req, err := http.NewRequestWithContext(ctx, method, w.Endpoint+Path, body)
	if err != nil {
		return nil, err
	}
	req.Header.Set("Metadata", "true")
	resp, err := w.HTTP.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if err != nil {
		return nil, err
	}
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("%s %s: %s %s", method, Path, resp.Status, bytes.TrimSpace(data))
	}
	return data, nil
}

func (w *Watcher) logf(format string, args ...any) {
	if w.Logf != nil {
		w.Logf(format, args...)
	}
}
