package roll

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/clusterforge/clusterforge/components/change"
	"github.com/clusterforge/clusterforge/components/spec"
	"github.com/clusterforge/clusterforge/components/wellknown"
)

// listNodes lists every node.
func listNodes(ctx context.Context, o Observer) ([]corev1.Node, error) {
	cs, err := o.Clientset()
	if err != nil {
		return nil, err
	}
	nodes, err := cs.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, err
	}
	return nodes.Items, nil
}

// AddNodes adds every pool's nodes to inv under the pool's role and sorts every role's names:
// workers are counted by their nodes, whatever the environment.
func AddNodes(ctx context.Context, o Observer, inv change.Inventory) (change.Inventory, error) {
	nodes, err := listNodes(ctx, o)
	if err != nil {
		return nil, err
	}
	for _, n := range nodes {
		if pool := n.Labels[wellknown.PoolLabel]; pool != "" {
			inv[spec.WorkerRole(pool)] = append(inv[spec.WorkerRole(pool)], n.Name)
		}
	}
	for _, names := range inv {
		slices.Sort(names)
	}
	return inv, nil
}

// LeaseHolderHost is the host name in a kube-system lease's holder, "<host name>_<id>".
func LeaseHolderHost(ctx context.Context, cs *kubernetes.Clientset, lease string) (string, error) {
	l, err := cs.CoordinationV1().Leases("kube-system").Get(ctx, lease, metav1.GetOptions{})
	if err != nil {
		return "", err
	}
	if l.Spec.HolderIdentity == nil || *l.Spec.HolderIdentity == "" {
		return "", fmt.Errorf("lease %s has no holder", lease)
	}
	host, _, _ := strings.Cut(*l.Spec.HolderIdentity, "_")
	return host, nil
}

// GitVersion reads an apiserver's answer to GET /version.
func GitVersion(name string, code int, body []byte) (string, error) {
	var v struct {
		GitVersion string `json:"gitVersion"`
	}
	if err := json.Unmarshal(body, &v); err != nil || code != http.StatusOK {
		return "", fmt.Errorf("%s /version: %d %s", name, code, body)
	}
	return v.GitVersion, nil
}
