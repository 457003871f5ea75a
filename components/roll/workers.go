package roll

import (
	"context"
	"fmt"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"

	"github.com/clusterforge/clusterforge/components/drain"
	"github.com/clusterforge/clusterforge/components/nodestatus"
)

// replaceWorkers rolls one batch of a pool: every node cordoned and drained through the
// eviction API (which honours PodDisruptionBudgets: a refused eviction is retried, never
// forced), replaced, Ready on the desired kubelet version and uncordoned.
func (r *Roller) replaceWorkers(ctx context.Context, nodes []string) error {
	cs, err := r.Target.Clientset()
	if err != nil {
		return err
	}
	for _, n := range nodes {
		if err := setUnschedulable(ctx, cs, n, true); err != nil {
			return err
		}
	}
	for _, n := range nodes {
		began := time.Now()
		evicted, err := drain.Node(ctx, cs, n)
		if err != nil {
			return err
		}
		r.logf("%s: cordoned and drained in %s (%d pods evicted)", n, time.Since(began).Round(100*time.Millisecond), evicted)
	}
	replaced := time.Now()
	for _, n := range nodes {
		if err := r.Target.Replace(ctx, n); err != nil {
			return fmt.Errorf("replace %s: %w", n, err)
		}
		r.logf("%s: replaced, booted in %s", n, time.Since(replaced).Round(100*time.Millisecond))
	}
	want := r.Desired.Versions.Kubernetes
	for _, n := range nodes {
		if err := poll(ctx, n+" to be Ready on "+want, func() error {
			node, err := cs.CoreV1().Nodes().Get(ctx, n, metav1.GetOptions{})
			if err != nil {
				return err
			}
			if err := nodestatus.Ready(node, time.Now()); err != nil {
				return err
			}
			if v := node.Status.NodeInfo.KubeletVersion; v != want {
				return fmt.Errorf("kubelet %s", v)
			}
			return nil
		}); err != nil {
			return err
		}
		r.logf("%s: Ready on %s %s after the replacement began", n, want, time.Since(replaced).Round(100*time.Millisecond))
		if err := setUnschedulable(ctx, cs, n, false); err != nil {
			return err
		}
	}
	return nil
}

func setUnschedulable(ctx context.Context, cs *kubernetes.Clientset, node string, v bool) error {
	patch := fmt.Sprintf(`{"spec":{"unschedulable":%t}}`, v)
	_, err := cs.CoreV1().Nodes().Patch(ctx, node, types.StrategicMergePatchType, []byte(patch), metav1.PatchOptions{})
	return err
}
