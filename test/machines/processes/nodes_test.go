package processes

import (
	"bytes"
	"errors"
	"io"
	"strconv"
	"testing"
	"time"

	"github.com/itchyny/gojq"
	"gopkg.in/yaml.v3"

	"github.com/clusterforge/clusterforge/test/scale"
)

// Simulated nodes first report their status at phases spread over the report period, each one
// its own, and carry a busy kubelet's image list.
func TestSimulatedNodesReportApartWithAKubeletsImages(t *testing.T) {
	p := devLayout(t)
	const nodes = 600
	var bins [10]int // the report period in tenths
	seen := map[string]bool{}
	for n := range nodes {
		node, err := p.PoolNode(0, n)
		if err != nil {
			t.Fatal(err)
		}
		seconds, err := strconv.Atoi(node.Annotations[KWOKFirstStatusAnnotation])
		first := time.Duration(seconds) * time.Second
		if err != nil || first < time.Second || first >= scale.NodeStatusReport {
			t.Fatalf("node %s first reports after %q (%v), want 1 s to %s", node.Name, node.Annotations[KWOKFirstStatusAnnotation], err, scale.NodeStatusReport)
		}
		bins[int(first*10/scale.NodeStatusReport)]++
		if len(node.Status.Images) != nodeStatusMaxImages || len(node.Status.Addresses) != 2 || node.Status.NodeInfo.BootID == "" {
			t.Fatalf("node %s: %d images, addresses %v, system info %+v", node.Name, len(node.Status.Images), node.Status.Addresses, node.Status.NodeInfo)
		}
		ip := node.Status.Addresses[0].Address
		if seen[ip] {
			t.Fatalf("node %s has %s, another node's address", node.Name, ip)
		}
		seen[ip] = true
	}
	for i, got := range bins {
		if got < nodes/10*9/10 || got > nodes/10*11/10 {
			t.Errorf("%d of %d nodes first report in tenth %d of the period, want %d ± 10 %%: %v", got, nodes, i, nodes/10, bins)
		}
	}
}

// KWOK's configuration replaces KWOK's own node stages with both of its own, and its report stage
// schedules each node's next report, by the jq engine KWOK runs, at its phase after it was made
// Ready and every scale.NodeStatusReport after any later report.
func TestKWOKReportsNodeStatusAsAKubelet(t *testing.T) {
	dec := yaml.NewDecoder(bytes.NewReader([]byte(kwokConfig)))
	type stage struct {
		Kind     string `yaml:"kind"`
		Metadata struct{ Name string }
		Spec     struct {
			Delay *struct {
				DurationMilliseconds int64 `yaml:"durationMilliseconds"`
				DurationFrom         struct {
					JQ struct{ Expression string } `yaml:"jq"`
				} `yaml:"durationFrom"`
			} `yaml:"delay"`
		} `yaml:"spec"`
	}
	stages := map[string]stage{}
	for {
		var doc stage
		if err := dec.Decode(&doc); errors.Is(err, io.EOF) {
			break
		} else if err != nil {
			t.Fatal(err)
		}
		if doc.Kind == "Stage" {
			stages[doc.Metadata.Name] = doc
		}
	}
	report, ok := stages["node-status-report"]
	if _, init := stages["node-initialize"]; !ok || !init || len(stages) != 2 || report.Spec.Delay == nil {
		t.Fatalf("stages %v, want node-initialize and node-status-report, with a delay", stages)
	}
	if got := report.Spec.Delay.DurationMilliseconds; got != scale.NodeStatusReport.Milliseconds() {
		t.Errorf("status reported every %d ms, want %d", got, scale.NodeStatusReport.Milliseconds())
	}
	query, err := gojq.Parse(report.Spec.Delay.DurationFrom.JQ.Expression)
	if err != nil {
		t.Fatal(err)
	}
	node := func(heartbeat, transition string) map[string]any {
		return map[string]any{
			"metadata": map[string]any{"annotations": map[string]any{KWOKFirstStatusAnnotation: "137"}},
			"status": map[string]any{"conditions": []any{
				map[string]any{"type": "MemoryPressure", "lastHeartbeatTime": "2026-11-27T11:00:00Z", "lastTransitionTime": "2026-11-27T11:00:00Z"},
				map[string]any{"type": "Ready", "lastHeartbeatTime": heartbeat, "lastTransitionTime": transition},
			}},
		}
	}
	for _, tc := range []struct {
		name string
		node map[string]any
		want string
	}{
		{"made Ready just now", node("2026-11-27T12:00:00Z", "2026-11-27T12:00:00Z"), "2026-11-27T12:02:17Z"},
		{"reported since", node("2026-11-27T12:02:17Z", "2026-11-27T12:00:00Z"), "2026-11-27T12:07:17Z"},
	} {
		got, ok := query.Run(tc.node).Next()
		if err, isErr := got.(error); isErr || !ok || got != tc.want {
			t.Errorf("%s: next report at %v (%v), want %s", tc.name, got, err, tc.want)
		}
	}
}
