package roll

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"golang.org/x/sync/errgroup"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"

	"github.com/clusterforge/clusterforge/components/drain"
	"github.com/clusterforge/clusterforge/components/nodestatus"
)

// replaceWorkers rolls one batch of a pool: every node cordoned, then drained through the
// eviction API, DrainParallelism at a time (a PodDisruptionBudget's refusal is retried, never
// forced); the batch replaced at once; each node, once Ready on the desired kubelet version,
// uncordoned and finished.
func (r *Roller) replaceWorkers(ctx context.Context, nodes []string, finished func(string) error) error {
	cs, err := r.Target.Clientset()
	if err != nil {
		return err
	}
	for _, n := range nodes {
		if err := setUnschedulable(ctx, cs, n, true); err != nil {
			return err
		}
	}
	drains, dctx := errgroup.WithContext(ctx)
	drains.SetLimit(r.DrainParallelism)
	for _, n := range nodes {
		drains.Go(func() error {
			began := time.Now()
			evicted, err := drain.Node(dctx, cs, n, r.logf)
			if err != nil {
				return fmt.Errorf("drain %s: %w", n, err)
			}
			r.logf("%s: cordoned and drained in %s (%d pods evicted)", n, time.Since(began).Round(100*time.Millisecond), evicted)
			return nil
		})
	}
	if err := drains.Wait(); err != nil {
		return err
	}
	replaced := time.Now()
	if batch, ok := r.Target.(WorkerReplacer); ok {
		if err := batch.ReplaceWorkers(ctx, nodes); err != nil {
			return fmt.Errorf("replace %v: %w", nodes, err)
		}
	} else {
		for _, n := range nodes {
			if err := r.Target.Replace(ctx, n); err != nil {
				return fmt.Errorf("replace %s: %w", n, err)
			}
		}
	}
	r.logf("%v: replaced, booted in %s", nodes, time.Since(replaced).Round(100*time.Millisecond))
	want := r.Desired.Versions.Kubelet
	waiting := slices.Clone(nodes)
	return poll(ctx, fmt.Sprintf("%v to be Ready on %s", waiting, want), func() error {
		var notYet []error
		for _, n := range slices.Clone(waiting) {
			node, err := cs.CoreV1().Nodes().Get(ctx, n, metav1.GetOptions{})
			if err == nil {
				err = nodestatus.Ready(node, time.Now())
			}
			if err == nil && node.Status.NodeInfo.KubeletVersion != want {
				err = fmt.Errorf("kubelet %s", node.Status.NodeInfo.KubeletVersion)
			}
			if err != nil {
				notYet = append(notYet, fmt.Errorf("%s: %w", n, err))
				continue
			}
			r.logf("%s: Ready on %s %s after the replacement began", n, want, time.Since(replaced).Round(100*time.Millisecond))
			if err := setUnschedulable(ctx, cs, n, false); err != nil {
				return permanent{err}
			}
			if err := finished(n); err != nil {
				return permanent{err}
			}
			waiting = slices.DeleteFunc(waiting, func(w string) bool { return w == n })
		}
		return errors.Join(notYet...)
	})
}

func setUnschedulable(ctx context.Context, cs *kubernetes.Clientset, node string, v bool) error {
	patch := fmt.Sprintf(`{"spec":{"unschedulable":%t}}`, v)
	_, err := cs.CoreV1().Nodes().Patch(ctx, node, types.StrategicMergePatchType, []byte(patch), metav1.PatchOptions{})
	return err
}
