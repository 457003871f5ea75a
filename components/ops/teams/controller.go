package teams

import (
	"context"
	"errors"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/workqueue"
)

// Controller keeps every team's taint on exactly its allocated nodes, from one shared node
// informer and one ConfigMap informer (L07): any change of either reconciles the whole fleet in
// memory and writes only the nodes whose owner changed.
type Controller struct {
	Client kubernetes.Interface
	// Namespace holds the ConfigMap (kube-system).
	Namespace string
	// Logf reports each change and each bad allocation; may be nil.
	Logf func(format string, args ...any)

	nodes, configs cache.Store
	queue          workqueue.TypedRateLimitingInterface[string]
}

// fleet is the one key the queue holds: every event asks for the same reconcile.
const fleet = "fleet"

// Run works until ctx ends; nodes is a node informer, configs an informer of the namespace's
// ConfigMaps (ideally just ConfigMapName's, by field selector), both registered with their factories.
func (c *Controller) Run(ctx context.Context, nodes, configs cache.SharedIndexInformer) error {
	c.nodes, c.configs = nodes.GetStore(), configs.GetStore()
	c.queue = workqueue.NewTypedRateLimitingQueue(workqueue.DefaultTypedControllerRateLimiter[string]())
	defer c.queue.ShutDown()
	changed := cache.ResourceEventHandlerFuncs{
		AddFunc:    func(any) { c.queue.Add(fleet) },
		UpdateFunc: func(any, any) { c.queue.Add(fleet) },
		DeleteFunc: func(any) { c.queue.Add(fleet) },
	}
	for _, inf := range []cache.SharedIndexInformer{nodes, configs} {
		reg, err := inf.AddEventHandler(changed)
		if err != nil {
			return err
		}
		defer func() { _ = inf.RemoveEventHandler(reg) }() // a leader that stands again adds its own
	}
	if !cache.WaitForCacheSync(ctx.Done(), nodes.HasSynced, configs.HasSynced) {
		return ctx.Err()
	}
	go func() {
		<-ctx.Done()
		c.queue.ShutDown()
	}()
	for {
		key, shutdown := c.queue.Get()
		if shutdown {
			return ctx.Err()
		}
		if err := c.Reconcile(ctx); err != nil {
			c.logf("teams: %v", err)
			c.queue.AddRateLimited(key)
		} else {
			c.queue.Forget(key)
		}
		c.queue.Done(key)
	}
}

// Reconcile sets every node's team taint from the ConfigMap. A ConfigMap that does not parse
// changes nothing: yesterday's allocations stand until today's are valid.
func (c *Controller) Reconcile(ctx context.Context) error {
	obj, exists, err := c.configs.GetByKey(c.Namespace + "/" + ConfigMapName)
	if err != nil {
		return err
	}
	var allocs []Allocation
	if exists {
		if allocs, err = ParseAllocations(obj.(*corev1.ConfigMap).Data[ConfigMapKey]); err != nil {
			c.logf("teams: allocations unchanged: %v", err)
			return nil
		}
	}
	var nodes []*corev1.Node
	for _, o := range c.nodes.List() {
		nodes = append(nodes, o.(*corev1.Node))
	}
	owners, short := Owners(allocs, nodes)
	for _, err := range short {
		c.logf("teams: %v", err)
	}
	var errs []error
	for _, n := range nodes {
		taints, changed := WithOwner(n, owners[n.Name])
		if !changed {
			continue
		}
		updated := n.DeepCopy()
		updated.Spec.Taints = taints
		// An update at the cached resourceVersion: a node changed since is a conflict, retried
		// from the newer cache.
		if _, err := c.Client.CoreV1().Nodes().Update(ctx, updated, metav1.UpdateOptions{}); err != nil {
			errs = append(errs, fmt.Errorf("node %s to team %q: %w", n.Name, owners[n.Name], err))
			continue
		}
		c.logf("teams: node %s: team %q (was %q)", n.Name, owners[n.Name], TeamOf(n))
	}
	return errors.Join(errs...)
}

func (c *Controller) logf(format string, args ...any) {
	if c.Logf != nil {
		c.Logf(format, args...)
	}
}
