package scaleset

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"slices"

	"golang.org/x/sync/errgroup"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore"
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
// scale sets' (SetCapacity says how it is placed), and its joined nodes are the pool's Ready nodes.
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
	each, _, err := p.capacities(ctx)
	total := 0
	for _, n := range each {
		total += n
	}
	return total, err
}

// capacities are the scale sets' requested instance counts and their models' ETags, in order.
func (p *Pool) capacities(ctx context.Context) ([]int, []*string, error) {
	counts, etags := make([]int, len(p.Sets)), make([]*string, len(p.Sets))
	for i, s := range p.Sets {
		got, err := p.ScaleSets.Get(ctx, p.ResourceGroup, s.AzureName, nil)
		if err != nil {
			return nil, nil, err
		}
		if got.SKU == nil || got.SKU.Capacity == nil {
			return nil, nil, fmt.Errorf("scale set %s reports no capacity", s.AzureName)
		}
		if got.Etag == nil {
			return nil, nil, fmt.Errorf("scale set %s reports no ETag: a write could undo another writer's", s.AzureName)
		}
		counts[i], etags[i] = int(*got.SKU.Capacity), got.Etag
	}
	return counts, etags, nil
}

// staleReads is how many times SetCapacity reads the scale sets again after another writer (the
// autoscaler) changed one between its read and its write.
const staleReads = 3

// SetCapacity raises the pool to n instances, adding to the scale sets what they have (the
// autoscaler may have grown them unevenly) and lowering none: removing a node is the
// autoscaler's, under the scale-down brake. Each write carries the ETag of the model it read, so a
// resize made in between is never undone; the sets are then read again. It updates only the SKU's
// capacity of each set it raises: every update started, then all waited for together (a GPU pool
// is 80 scale sets; one after another, a step took 80 creations' time).
func (p *Pool) SetCapacity(ctx context.Context, n int) error {
	var err error
	for attempt := range staleReads {
		if err = p.raise(ctx, n, attempt > 0); !errors.Is(err, errStale) {
			return err
		}
	}
	return err
}

// errStale is a write refused because the scale set's model moved since it was read.
var errStale = errors.New("the scale set changed since it was read")

// raise adds to the sets what takes the pool to n; again, after a refused write, a pool already
// there (the sets written before the refusal, and the other writer's resize) is done.
func (p *Pool) raise(ctx context.Context, n int, again bool) error {
	from, etags, err := p.capacities(ctx)
	if err != nil {
		return err
	}
	have, limit := 0, 0
	for i, s := range p.Sets {
		have, limit = have+from[i], limit+max(s.MaxNodes, from[i])
	}
	switch {
	case again && n <= have:
		return nil
	case n > limit:
		return fmt.Errorf("%d nodes: the pool's scale sets hold %d (pools[].maxNodes)", n, limit)
	case n < have:
		return fmt.Errorf("%d nodes: the pool has %d; shrinking is the autoscaler's, under the scale-down brake", n, have)
	}
	var waits errgroup.Group
	var failed error
	for i, want := range grow(from, n-have, p.Sets) {
		if want == from[i] {
			continue
		}
		s := p.Sets[i]
		poller, err := p.ScaleSets.BeginUpdate(ctx, p.ResourceGroup, s.AzureName, armcompute.VirtualMachineScaleSetUpdate{
			SKU: &armcompute.SKU{Capacity: to.Ptr(int64(want))},
		}, &armcompute.VirtualMachineScaleSetsClientBeginUpdateOptions{IfMatch: etags[i]})
		if err != nil {
			failed = fmt.Errorf("scale set %s to %d: %w", s.AzureName, want, stale(err))
			break // every update started is still waited for
		}
		waits.Go(func() error {
			if _, err := poller.PollUntilDone(ctx, nil); err != nil {
				return fmt.Errorf("scale set %s to %d: %w", s.AzureName, want, stale(err))
			}
			return nil
		})
	}
	return errors.Join(failed, waits.Wait())
}

// stale marks a refused If-Match (412) as errStale.
func stale(err error) error {
	var re *azcore.ResponseError
	if errors.As(err, &re) && re.StatusCode == http.StatusPreconditionFailed {
		return fmt.Errorf("%w: %w", errStale, err)
	}
	return err
}

// grow adds n instances to the sets' counts from, each within its MaxNodes. A single placement
// group's set is filled before the next is started, so a pool grown part way holds whole
// InfiniBand fabrics, and a gang stays within one (wellknown.GangDomainLabel); other sets are
// grown as evenly as they allow, as the autoscaler balances them. The first set wins ties.
func grow(from []int, n int, sets []spec.ScaleSet) []int {
	out := slices.Clone(from)
	for range n {
		pick := -1
		for i, s := range sets {
			if out[i] >= s.MaxNodes {
				continue
			}
			if pick < 0 || s.SinglePlacementGroup && out[i] > out[pick] || !s.SinglePlacementGroup && out[i] < out[pick] {
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
