package machines

import (
	"fmt"
	"maps"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"

	"github.com/clusterforge/clusterforge/components/machine"
	"github.com/clusterforge/clusterforge/components/pki"
	"github.com/clusterforge/clusterforge/components/spec"
)

// kwokAnnotation marks the nodes KWOK simulates.
const KWOKAnnotation = "kwok.x-k8s.io/node"

// Nodes are the simulated worker nodes: per pool, up to NodesPerPool of its maxNodes.
func (p *Layout) Nodes() ([]corev1.Node, error) {
	var nodes []corev1.Node
	for i, pool := range p.Cluster.Pools {
		for n := range min(pool.MaxNodes, p.NodesPerPool) {
			node, err := p.PoolNode(i, n)
			if err != nil {
				return nil, err
			}
			nodes = append(nodes, node)
		}
	}
	return nodes, nil
}

// PoolNode is the n-th simulated node of pool i, named <cluster>-<pool>-<n>, with the labels and
// taints its kubelet registers and its VM size's capacity.
func (p *Layout) PoolNode(i, n int) (corev1.Node, error) {
	pool := p.Cluster.Pools[i]
	capacity, ok := spec.VMCapacity(pool.VMSize)
	if !ok {
		return corev1.Node{}, &spec.FieldError{Field: fmt.Sprintf("pools[%d].vmSize", i),
			Problem: fmt.Sprintf("the rehearsal does not know the capacity of %s", pool.VMSize),
			Fix:     "add the size to spec.VMCapacity's table"}
	}
	res := corev1.ResourceList{
		corev1.ResourceCPU:    *resource.NewQuantity(int64(capacity.CPUs), resource.DecimalSI),
		corev1.ResourceMemory: *resource.NewQuantity(int64(capacity.MemoryGiB)<<30, resource.BinarySI),
		corev1.ResourcePods:   *resource.NewQuantity(int64(p.Cluster.Kubelet.MaxPods), resource.DecimalSI),
	}
	if capacity.GPUs > 0 {
		res[machine.GPUResource] = *resource.NewQuantity(int64(capacity.GPUs), resource.DecimalSI)
	}
	var taints []corev1.Taint
	for _, t := range machine.NodeTaints(pool) {
		taints = append(taints, corev1.Taint{Key: t.Key, Value: t.Value, Effect: corev1.TaintEffect(t.Effect)})
	}
	name := fmt.Sprintf("%s-%s-%d", p.Cluster.Name, pool.Name, n)
	labels := machine.NodeLabels(pool)
	maps.Copy(labels, map[string]string{
		corev1.LabelHostname:           name,
		corev1.LabelOSStable:           "linux",
		corev1.LabelArchStable:         "amd64",
		corev1.LabelInstanceTypeStable: pool.VMSize,
		corev1.LabelTopologyZone:       p.Cluster.Location + "-" + p.Cluster.Zones[n%len(p.Cluster.Zones)],
	})
	return corev1.Node{
		ObjectMeta: metav1.ObjectMeta{Name: name, Labels: labels, Annotations: map[string]string{KWOKAnnotation: "fake"}},
		Spec:       corev1.NodeSpec{Taints: taints},
		Status: corev1.NodeStatus{Capacity: res, Allocatable: res,
			NodeInfo: corev1.NodeSystemInfo{KubeletVersion: p.Cluster.Versions.Kubernetes}}, // KWOK keeps it
	}, nil
}

// KWOKUser is who KWOK acts as: a member of system:nodes, so that priority and fairness classes
// its node heartbeats and lease renewals as it classes kubelets' (flow schemas system-node-high
// and system-nodes), not as an exempt administrator's. It is not named system:node:<node>: the
// Node authorizer and NodeRestriction would confine it to that one node, and KWOK acts for all;
// RBAC grants it what their kubelets do together (kwokAccess).
const KWOKUser = "clusterforge:kwok"

// KWOKRESTConfig is KWOK's identity as a client: what registers the simulated nodes.
func (p *Layout) KWOKRESTConfig() (*rest.Config, error) {
	return p.RESTConfigAs(KWOKUser, pki.NodesGroup)
}
