package remediation

import (
	"fmt"
	"path/filepath"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/clusterforge/clusterforge/components/spec"
	"github.com/clusterforge/clusterforge/components/wellknown"
)

// A zone's outage is waited out: with every stack's pools at their full size, spread over their
// zones as their scale sets spread instances, one zone's nodes NotReady leave nothing to mark in
// any pool; one bad node of a pool is still marked.
func TestAZoneOutageMarksNothing(t *testing.T) {
	files, err := filepath.Glob(filepath.Join("..", "..", "..", spec.StackDir, "Pulumi.*.yaml"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no stacks: %v", err)
	}
	for _, f := range files {
		c, err := spec.LoadStack(f)
		if err != nil {
			t.Fatal(err)
		}
		p := DefaultPolicy()
		p.MaxUnhealthy = c.RemediationMaxUnhealthy()
		down := c.Zones[0]
		var nodes []*corev1.Node
		for _, set := range c.ScaleSets() {
			for i := range set.MaxNodes {
				ready := corev1.ConditionTrue
				if set.Zones[i%len(set.Zones)] == down {
					ready = corev1.ConditionUnknown
				}
				nodes = append(nodes, &corev1.Node{
					ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("%s-%d", set.AzureName, i), Labels: map[string]string{wellknown.PoolLabel: set.Pool.Name}},
					Status:     corev1.NodeStatus{Conditions: []corev1.NodeCondition{{Type: corev1.NodeReady, Status: ready}}},
				})
			}
		}
		for _, pool := range c.Pools {
			if err := p.TooManyUnhealthy(nodes, pool.Name); err == nil {
				t.Errorf("%s: zone %s down, remediation would mark nodes of pool %s (%.0f%% allowed unhealthy)", c.Name, down, pool.Name, 100*p.MaxUnhealthy)
			}
		}
		for _, n := range nodes { // the zone back, one node of the first pool bad
			n.Status.Conditions[0].Status = corev1.ConditionTrue
		}
		nodes[0].Status.Conditions[0].Status = corev1.ConditionFalse
		if err := p.TooManyUnhealthy(nodes, nodes[0].Labels[wellknown.PoolLabel]); err != nil {
			t.Errorf("%s: one bad node: %v", c.Name, err)
		}
	}
}
