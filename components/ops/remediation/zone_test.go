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

// A zone's outage is waited out in that zone alone: with every stack's pools at their full size,
// spread over their zones as their scale sets spread instances and labelled as the CSR approver
// labels them, one zone's nodes NotReady leave nothing of that zone to mark in any pool, while a
// bad node of another zone is still marked, outage or not.
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
		down := c.Zones[0]
		var nodes []*corev1.Node
		firstUp := map[string]*corev1.Node{} // by pool: a node of a zone that stays up
		for _, set := range c.ScaleSets() {
			for i := range set.MaxNodes {
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
				if zone != down && firstUp[set.Pool.Name] == nil {
					firstUp[set.Pool.Name] = n
				}
				nodes = append(nodes, n)
			}
		}
		for _, n := range nodes {
			if n.Status.Conditions[0].Status != corev1.ConditionTrue {
				if err := p.TooManyUnhealthy(nodes, n); err == nil {
					t.Errorf("%s: zone %s down, remediation would mark %s of pool %s", c.Name, down, n.Name, n.Labels[wellknown.PoolLabel])
				}
			}
		}
		for pool, n := range firstUp { // one bad node of a zone that stayed up, during the outage
			n.Status.Conditions[0].Status = corev1.ConditionFalse
			if err := p.TooManyUnhealthy(nodes, n); err != nil {
				t.Errorf("%s: zone %s down, one bad node of pool %s elsewhere: %v", c.Name, down, pool, err)
			}
			n.Status.Conditions[0].Status = corev1.ConditionTrue
		}
	}
}
