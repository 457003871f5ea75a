package main

import (
	"context"
	"flag"
	"log"

	"github.com/clusterforge/clusterforge/components/ops/preflight"
)

// retest puts idle nodes back under preflight, once.
func retest(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("retest", flag.ContinueOnError)
	kubeconfig := fs.String("kubeconfig", "", "kubeconfig (default: in-cluster)")
	nodes := fs.String("nodes", "", "label selector of the nodes to re-test")
	agents := fs.String("agents", "", "label selector of the preflight agent's pods")
	namespace := fs.String("namespace", "kube-system", "the agents' namespace")
	fraction := fs.Float64("max-fraction", 0.05, "most of the selected nodes re-tested at once")
	if err := fs.Parse(args); err != nil {
		return err
	}
	cs, err := client(*kubeconfig, nil)
	if err != nil {
		return err
	}
	r := &preflight.Retest{Client: cs, Nodes: *nodes, Agents: *agents, AgentNamespace: *namespace, MaxFraction: *fraction}
	done, err := r.Run(ctx)
	log.Printf("re-testing %d nodes: %v", len(done), done)
	return err
}
