package dataplane

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"sort"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/clusterforge/clusterforge/components/wellknown"
	"github.com/clusterforge/clusterforge/test/drills"
	"github.com/clusterforge/clusterforge/test/e2e/framework"
	"github.com/clusterforge/clusterforge/test/machines/processes"
)

// The scale benchmark's KWOK nodes are registered with the status a real kubelet reports: every
// field a booted worker's kubelet fills in, the simulated node of its pool fills in too, except
// the conditions, which KWOK's stages report. Production workers list more images than these
// booted ones pulled, so the simulated status may be larger, never smaller.
func SimulatedNodesHaveARealKubeletsStatus(t *testing.T) {
	framework.NeedBoot(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	pool := framework.Booted.Cluster.Pools[0]
	nodes, err := drills.Clientset(t, framework.Booted).CoreV1().Nodes().List(ctx, metav1.ListOptions{LabelSelector: wellknown.PoolLabel + "=" + pool.Name})
	if err != nil {
		t.Fatal(err)
	}
	if len(nodes.Items) == 0 {
		t.Fatalf("no node of pool %s", pool.Name)
	}
	real := nodes.Items[0]
	simulated, err := (&processes.Layout{Layout: framework.Booted.Layout}).PoolNode(0, 0)
	if err != nil {
		t.Fatal(err)
	}
	realPaths, simPaths := filledPaths(t, real.Status), filledPaths(t, simulated.Status)
	var missing []string
	for _, p := range realPaths {
		if !slices.Contains(simPaths, p) && !slices.Contains([]string{"conditions", "phase"}, firstKey(p)) {
			missing = append(missing, p)
		}
	}
	if len(missing) > 0 {
		t.Errorf("the kubelet of %s fills in status fields the simulated node lacks: %v", real.Name, missing)
	}
	realSize, simSize := jsonSize(t, real.Status), jsonSize(t, simulated.Status)
	t.Logf("node %s: status of %d bytes, %d images; simulated: %d bytes, %d images", real.Name, realSize, len(real.Status.Images), simSize, len(simulated.Status.Images))
	if simSize < realSize {
		t.Errorf("the simulated node's status is %d bytes, smaller than the real one's %d", simSize, realSize)
	}
}

// filledPaths lists the paths of v's non-empty leaves: list items as [], or as [type=X] when
// they have a type.
func filledPaths(t *testing.T, v any) []string {
	t.Helper()
	data, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	var doc any
	if err := json.Unmarshal(data, &doc); err != nil {
		t.Fatal(err)
	}
	seen := map[string]bool{}
	var walk func(prefix string, v any)
	walk = func(prefix string, v any) {
		switch v := v.(type) {
		case map[string]any:
			for k, child := range v {
				walk(prefix+"."+k, child)
			}
		case []any:
			for _, item := range v {
				index := "[]"
				if m, ok := item.(map[string]any); ok && m["type"] != nil {
					index = fmt.Sprintf("[type=%v]", m["type"])
				}
				walk(prefix+index, item)
			}
		case string:
			if v != "" {
				seen[prefix] = true
			}
		case nil:
		default:
			seen[prefix] = true
		}
	}
	walk("", doc)
	out := make([]string, 0, len(seen))
	for p := range seen {
		out = append(out, p[1:])
	}
	sort.Strings(out)
	return out
}

func firstKey(path string) string {
	for i, r := range path {
		if r == '.' || r == '[' {
			return path[:i]
		}
	}
	return path
}

func jsonSize(t *testing.T, v any) int {
	t.Helper()
	data, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return len(data)
}
