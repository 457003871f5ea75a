package processes

import (
	"bytes"
	"errors"
	"io"
	"strings"
	"testing"
	"time"

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
		first, err := time.ParseDuration(node.Annotations[KWOKFirstStatusAnnotation])
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

// KWOK's configuration reports status every scale.NodeStatusReport, and replaces KWOK's own node
// stages with both of its own.
func TestKWOKReportsNodeStatusAsAKubelet(t *testing.T) {
	dec := yaml.NewDecoder(bytes.NewReader([]byte(kwokConfig)))
	stages := map[string]map[string]any{}
	for {
		var doc struct {
			Kind     string                `yaml:"kind"`
			Metadata struct{ Name string } `yaml:"metadata"`
			Spec     map[string]any        `yaml:"spec"`
		}
		if err := dec.Decode(&doc); errors.Is(err, io.EOF) {
			break
		} else if err != nil {
			t.Fatal(err)
		}
		if doc.Kind == "Stage" {
			stages[doc.Metadata.Name] = doc.Spec
		}
	}
	report, ok := stages["node-status-report"]
	if !ok || len(stages) != 2 {
		t.Fatalf("stages %v, want node-initialize and node-status-report", stages)
	}
	delay, _ := report["delay"].(map[string]any)
	if got := delay["durationMilliseconds"]; got != int(scale.NodeStatusReport.Milliseconds()) {
		t.Errorf("status reported every %v ms, want %d", got, scale.NodeStatusReport.Milliseconds())
	}
	if jq, _ := delay["durationFrom"].(map[string]any)["jq"].(string); !strings.Contains(jq, KWOKFirstStatusAnnotation) {
		t.Errorf("the first report's delay %q does not read %s", jq, KWOKFirstStatusAnnotation)
	}
}
