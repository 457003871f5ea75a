package framework

import (
	"context"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/clusterforge/clusterforge/components/wellknown"
)

// DrillNodes registers KWOK nodes of the shared rehearsal's pool (an index of its stack's pools),
// one per name, shaped as the drill needs, and deletes them when the test ends.
func DrillNodes(t *testing.T, cs *kubernetes.Clientset, pool int, names []string, shape func(*corev1.Node)) {
	t.Helper()
	t.Cleanup(func() {
		for _, name := range names {
			_ = cs.CoreV1().Nodes().Delete(context.Background(), name, metav1.DeleteOptions{})
		}
	})
	for i, name := range names {
		node, err := Running.PoolNode(pool, 900+i)
		if err != nil {
			t.Fatal(err)
		}
		node.Name, node.Labels[corev1.LabelHostname] = name, name
		// A node's only name among its addresses is its own (clusterforge-node-addresses), as KWOK
		// writes the status with a node's credentials.
		for j, a := range node.Status.Addresses {
			if a.Type == corev1.NodeHostName {
				node.Status.Addresses[j].Address = name
			}
		}
		shape(&node)
		if _, err := cs.CoreV1().Nodes().Create(context.Background(), &node, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
}

// SetPlacement gives a drill node the placement labels (wellknown.PlacementLabels) of a pool and
// gang domain of the drill's own.
func SetPlacement(node *corev1.Node, pool, gangDomain string) {
	node.Labels[wellknown.PoolLabel], node.Labels[wellknown.GangDomainLabel] = pool, gangDomain
}
