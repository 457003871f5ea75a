package scaleset

import (
	"context"
	"errors"
	"fmt"

	"golang.org/x/sync/errgroup"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore/to"
	"github.com/Azure/azure-sdk-for-go/sdk/resourcemanager/compute/armcompute/v6"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/clusterforge/clusterforge/components/nodestatus"
	"github.com/clusterforge/clusterforge/components/ops/joins"
	"github.com/clusterforge/clusterforge/components/spec"
	"github.com/clusterforge/clusterforge/components/wellknown"
)

// Pool is one worker pool's scale sets as joins.Grow drives them: its capacity is the sum of its
// scale sets', spread evenly over them, and its joined nodes are the pool's Ready nodes.
type Pool struct {
	ScaleSets     *armcompute.VirtualMachineScaleSetsClient
	ResourceGroup string
	// Sets are the pool's scale sets (spec.Cluster.ScaleSets), in order.
	Sets  []spec.ScaleSet
	Nodes kubernetes.Interface
}

var _ joins.Pool = (*Pool)(nil)

// PoolOf is the pool named name of a validated cluster.
func PoolOf(c *spec.Cluster, name string, client *armcompute.VirtualMachineScaleSetsClient, nodes kubernetes.Interface) (*Pool, error) {
	p := &Pool{ScaleSets: client, ResourceGroup: c.ResourceGroup(), Nodes: nodes}
	for _, s := range c.ScaleSets() {
		if s.Pool.Name == name {
			p.Sets = append(p.Sets, s)
		}
	}
	if len(p.Sets) == 0 {
		return nil, fmt.Errorf("the stack has no pool %q", name)
	}
	return p, nil
}

// Capacity sums the scale sets' requested instance counts.
func (p *Pool) Capacity(ctx context.Context) (int, error) {
	total := 0
	for _, s := range p.Sets {
		got, err := p.ScaleSets.Get(ctx, p.ResourceGroup, s.AzureName, nil)
		if err != nil {
			return 0, err
		}
		if got.SKU == nil || got.SKU.Capacity == nil {
			return 0, fmt.Errorf("scale set %s reports no capacity", s.AzureName)
		}
		total += int(*got.SKU.Capacity)
	}
	return total, nil
}

// SetCapacity spreads n over the scale sets, the first ones taking the remainder, each within
// its maximum, and updates only the SKU's capacity of each: every update started, then all waited
// for together (a GPU pool is 80 scale sets; one after another, a step took 80 creations' time).
func (p *Pool) SetCapacity(ctx context.Context, n int) error {
	limit := 0
	for _, s := range p.Sets {
		limit += s.MaxNodes
	}
	if n > limit {
		return fmt.Errorf("%d nodes: the pool's scale sets hold %d (pools[].maxNodes)", n, limit)
	}
	var waits errgroup.Group
	var failed error
	for i, want := range spread(n, p.Sets) {
		s := p.Sets[i]
		poller, err := p.ScaleSets.BeginUpdate(ctx, p.ResourceGroup, s.AzureName, armcompute.VirtualMachineScaleSetUpdate{
			SKU: &armcompute.SKU{Capacity: to.Ptr(int64(want))},
		}, nil)
		if err != nil {
			failed = fmt.Errorf("scale set %s to %d: %w", s.AzureName, want, err)
			break // every update started is still waited for
		}
		waits.Go(func() error {
			if _, err := poller.PollUntilDone(ctx, nil); err != nil {
				return fmt.Errorf("scale set %s to %d: %w", s.AzureName, want, err)
			}
			return nil
		})
	}
	return errors.Join(failed, waits.Wait())
}

// spread divides n over the sets as evenly as their MaxNodes allow: each node goes to the
// emptiest set with room, the first on ties.
func spread(n int, sets []spec.ScaleSet) []int {
	out := make([]int, len(sets))
	for range n {
		pick := -1
		for i, s := range sets {
			if out[i] < s.MaxNodes && (pick < 0 || out[i] < out[pick]) {
				pick = i
			}
		}
		if pick < 0 {
			break
		}
		out[pick]++
	}
	return out
}

// Joined counts the pool's Ready nodes, read from the apiservers' watch cache.
func (p *Pool) Joined(ctx context.Context) (int, error) {
	list, err := p.Nodes.CoreV1().Nodes().List(ctx, metav1.ListOptions{
		LabelSelector: wellknown.PoolLabel + "=" + p.Sets[0].Pool.Name, ResourceVersion: "0",
	})
	if err != nil {
		return 0, err
	}
	ready := 0
	for i := range list.Items {
		if nodestatus.IsReady(&list.Items[i]) {
			ready++
		}
	}
	return ready, nil
}
