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

// A zone's outage is waited out in that zone alone: with every stack's pools at their size now and
// at their full size, spread over their zones as their scale sets spread instances and labelled as
// the CSR approver labels them, each zone in turn down leaves nothing of it to mark in any pool,
// while a bad node of another zone is still marked.
func TestAZoneOutageHoldsOnlyThatZone(t *testing.T) {
	files, err := filepath.Glob(filepath.Join("..", "..", "..", spec.StackDir, "Pulumi.*.yaml"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no stacks: %v", err)
	}
	for _, f := range files {
		c, err := spec.LoadStack(f)
		if err != nil {
			t.Fatal(err)
		}
		if len(c.Zones) < 2 {
			t.Fatalf("%s: %d zones; the test needs a zone to stay up", c.Name, len(c.Zones))
		}
		p := DefaultPolicy()
		p.MaxUnhealthy = c.RemediationMaxUnhealthy()
		for _, full := range []bool{false, true} {
			for _, down := range c.Zones {
				var nodes []*corev1.Node
				up := map[string]*corev1.Node{} // by pool: a node of a zone that stays up
				for _, set := range c.ScaleSets() {
					size := set.Nodes
					if full {
						size = set.MaxNodes
					}
					for i := range size {
						zone := set.Zones[i%len(set.Zones)]
						ready := corev1.ConditionTrue
						if zone == down {
							ready = corev1.ConditionUnknown
						}
						n := &corev1.Node{
							ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("%s-%d", set.AzureName, i), Labels: map[string]string{
								wellknown.PoolLabel: set.Pool.Name, wellknown.ZoneLabel: wellknown.ZoneLabelValue(c.Location, zone)}},
							Status: corev1.NodeStatus{Conditions: []corev1.NodeCondition{{Type: corev1.NodeReady, Status: ready}}},
						}
						if zone != down && up[set.Pool.Name] == nil {
							up[set.Pool.Name] = n
						}
						nodes = append(nodes, n)
					}
				}
				what := fmt.Sprintf("%s (full size %v): zone %s down", c.Name, full, down)
				if inZone := len(nodes) - countReady(nodes); inZone < 2 {
					continue // a zone of one node cannot be out: its node is repaired as any other, by design
				}
				judged := map[string]bool{} // a down node of each pool: the policy reads pool and zone only
				for _, n := range nodes {
					if pool := n.Labels[wellknown.PoolLabel]; n.Status.Conditions[0].Status != corev1.ConditionTrue && !judged[pool] {
						judged[pool] = true
						if err := p.TooManyUnhealthy(nodes, n); err == nil {
							t.Errorf("%s: remediation would mark %s of pool %s", what, n.Name, pool)
						}
					}
				}
				for pool, n := range up { // one bad node of a zone that stayed up, during the outage
					n.Status.Conditions[0].Status = corev1.ConditionFalse
					if err := p.TooManyUnhealthy(nodes, n); err != nil {
						t.Errorf("%s: one bad node of pool %s elsewhere: %v", what, pool, err)
					}
					n.Status.Conditions[0].Status = corev1.ConditionTrue
				}
			}
		}
	}
}

func countReady(nodes []*corev1.Node) int {
	n := 0
	for _, node := range nodes {
		if node.Status.Conditions[0].Status == corev1.ConditionTrue {
			n++
		}
	}
	return n
}
