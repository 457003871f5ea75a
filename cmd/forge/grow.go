package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"syscall"
	"time"

	"k8s.io/client-go/kubernetes"

	"github.com/clusterforge/clusterforge/components/ops/joins"
	"github.com/clusterforge/clusterforge/components/ops/scaleset"
	"github.com/clusterforge/clusterforge/components/spec"
	"github.com/clusterforge/clusterforge/infra/rollazure"
)

// grow raises a pool of the stack's Azure cluster to target nodes in the stack's join steps
// (joins.step nodes, then joins.pause once they are Ready), instead of one capacity change the
// apiservers would take all at once (L11). Without yes it shows the steps and changes nothing.
func grow(dir, stack, pool string, target int, yes bool) error {
	desired, err := spec.LoadStack(spec.StackFile(dir, stack))
	if err != nil {
		return err
	}
	if pool == "" || target < 1 {
		return fmt.Errorf("name the pool and the node count: forge grow --stack %s --pool <name> --to <nodes>", stack)
	}
	ctx, cancel := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer cancel()
	t, _, err := rollazure.Open(ctx, stack, ".", desired, os.Stdout)
	if err != nil {
		return err
	}
	nodes, err := kubernetes.NewForConfig(t.Access.REST)
	if err != nil {
		return err
	}
	p, err := scaleset.PoolOf(desired, pool, t.Azure.ScaleSets, nodes)
	if err != nil {
		return err
	}
	pace := joins.PaceOf(desired)
	if !yes {
		from, steps, err := joins.Plan(ctx, p, target, pace)
		if err != nil {
			return err
		}
		fmt.Printf("pool %s of %s: ", pool, stack)
		joins.PrintPlan(os.Stdout, from, steps, pace)
		fmt.Printf("nothing changed; to grow: forge grow --stack %s --pool %s --to %d --yes\n", stack, pool, target)
		return nil
	}
	return joins.Grow(ctx, p, target, pace, 10*time.Second, os.Stdout)
}
