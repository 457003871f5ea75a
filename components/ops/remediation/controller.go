package remediation

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/workqueue"

	"github.com/clusterforge/clusterforge/components/drain"
	"github.com/clusterforge/clusterforge/components/ops/brake"
	"github.com/clusterforge/clusterforge/components/wellknown"
)

// Machines takes a broken node's machine away.
type Machines interface {
	// Remove stops the machine behind node for good and is idempotent. On Azure the scale-set
	// instance its provider ID names is deleted; the autoscaler brings a new one when pods need it.
	Remove(ctx context.Context, node *corev1.Node) error
}

// Controller runs the policy over every node, from one shared node informer (L07: no per-node
// polling; the drain lists the pods of one node at a time, by field selector).
type Controller struct {
	Client   kubernetes.Interface
	Policy   Policy
	Machines Machines
	// Logf reports each step, from several workers at once; may be nil.
	Logf func(format string, args ...any)
	// Now is the clock (tests); default time.Now.
	Now func() time.Time
	// DrainFor is how long one pass of a drain waits for pods to go before the controller looks at
	// other nodes. Default 1 minute.
	DrainFor time.Duration
	// Workers are how many nodes are worked on at once: drains and hand-backs wait on the API and
	// on Azure (a deletion takes about a minute). Marks are made one at a time. Default Workers.
	Workers int

	nodes cache.Store
	queue workqueue.TypedRateLimitingInterface[string]
	// marking is held for a whole Mark step, over held and stopped: marks are made one after
	// another, each asking the brake, which counts every removal before it.
	marking sync.Mutex
	// held are the nodes the brake refused, until when they are not asked for again: a node's
	// every status change would otherwise ask the webhook again, fleet-wide in a cascade.
	held map[string]time.Time
	// stopped is, by pool and zone, why marking stopped there (too many unhealthy), logged when it
	// changes.
	stopped map[string]string
}

// Workers is the default number of nodes worked on at once: 500 hand-backs (5 % of a 10,000-node
// fleet) one at a time took 8.39 hours at a minute a deletion (make bench-fleet).
const Workers = 10

// errRefused is a mark the scale-down brake turned away: the node waits for the brake's window.
var errRefused = errors.New("refused by the scale-down brake")

// retryRefused is how soon a node the brake held back is looked at again.
const retryRefused = time.Minute

// Run watches nodes through informer (already registered with its factory) and works until ctx
// ends.
func (c *Controller) Run(ctx context.Context, informer cache.SharedIndexInformer) error {
	if err := c.Policy.Validate(); err != nil {
		return err
	}
	c.start(informer.GetStore())
	c.queue = workqueue.NewTypedRateLimitingQueue(workqueue.DefaultTypedControllerRateLimiter[string]())
	defer c.queue.ShutDown()
	enqueue := func(obj any) {
		if n, ok := obj.(*corev1.Node); ok {
			c.queue.Add(n.Name)
		}
	}
	reg, err := informer.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    enqueue,
		UpdateFunc: func(_, obj any) { enqueue(obj) },
	})
	if err != nil {
		return err
	}
	defer func() { _ = informer.RemoveEventHandler(reg) }() // a leader that stands again adds its own
	if !cache.WaitForCacheSync(ctx.Done(), informer.HasSynced) {
		return ctx.Err()
	}
	go func() {
		<-ctx.Done()
		c.queue.ShutDown()
	}()
	var workers sync.WaitGroup
	for range c.Workers {
		workers.Add(1)
		go func() {
			defer workers.Done()
			for c.work(ctx) {
			}
		}()
	}
	workers.Wait()
	return ctx.Err()
}

// start sets the defaults and the node cache.
func (c *Controller) start(nodes cache.Store) {
	if c.Now == nil {
		c.Now = time.Now
	}
	if c.DrainFor == 0 {
		c.DrainFor = time.Minute
	}
	if c.Workers == 0 {
		c.Workers = Workers
	}
	c.nodes = nodes
	c.held = map[string]time.Time{}
	c.stopped = map[string]string{}
}

func (c *Controller) work(ctx context.Context) bool {
	name, shutdown := c.queue.Get()
	if shutdown {
		return false
	}
	defer c.queue.Done(name)
	again, err := c.sync(ctx, name)
	switch {
	case errors.Is(err, errRefused):
		c.queue.Forget(name)
		c.queue.AddAfter(name, retryRefused)
	case err != nil:
		c.logf("%s: %v", name, err)
		c.queue.AddRateLimited(name)
	default:
		c.queue.Forget(name)
		if again > 0 {
			c.queue.AddAfter(name, again)
		}
	}
	return true
}

// sync takes one step for the node and says when to look at it again.
func (c *Controller) sync(ctx context.Context, name string) (time.Duration, error) {
	obj, exists, err := c.nodes.GetByKey(name)
	if err != nil || !exists {
		return 0, err
	}
	node := obj.(*corev1.Node)
	now := c.Now()
	step, reason, again := c.Policy.Next(node, now)
	switch step {
	case Mark:
		c.marking.Lock()
		defer c.marking.Unlock()
		if until, ok := c.held[name]; ok && now.Before(until) {
			return until.Sub(now), nil
		}
		if err := c.tooManyUnhealthy(node); err != nil {
			c.held[name] = now.Add(retryRefused)
			return retryRefused, nil
		}
		err := c.mark(ctx, name, reason, now)
		if errors.Is(err, errRefused) {
			c.held[name] = now.Add(retryRefused)
		} else {
			delete(c.held, name)
		}
		return 0, err
	case Drain:
		left, err := c.drain(ctx, name)
		if err != nil || left {
			return min(30*time.Second, again.Sub(now)), err
		}
		return 0, c.handBack(ctx, node, "drained")
	case HandBack:
		return 0, c.handBack(ctx, node, "hand-back time reached")
	case Evacuate:
		if err := c.setEvacuated(ctx, name, reason); err != nil {
			return 0, err
		}
		left, err := c.drain(ctx, name)
		if err != nil || left {
			return 30 * time.Second, err
		}
		return 0, c.setDrained(ctx, name, now)
	case Restore:
		return 0, c.setEvacuated(ctx, name, "")
	case Unmark:
		return 0, c.unmark(ctx, name)
	}
	if again.IsZero() {
		return 0, nil
	}
	return again.Sub(now), nil
}

// mark cordons the node and sets the replace taint and annotations, in one update the brake's
// webhook reviews.
func (c *Controller) mark(ctx context.Context, name, reason string, now time.Time) error {
	node, err := c.Client.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		return err
	}
	if marked(node) {
		return nil
	}
	node.Spec.Unschedulable = true
	node.Spec.Taints = append(node.Spec.Taints, corev1.Taint{Key: brake.ReplaceTaint, Effect: corev1.TaintEffectNoSchedule})
	if node.Annotations == nil {
		node.Annotations = map[string]string{}
	}
	node.Annotations[wellknown.ReasonAnnotation] = reason
	node.Annotations[wellknown.SinceAnnotation] = now.UTC().Format(time.RFC3339)
	_, err = c.Client.CoreV1().Nodes().Update(ctx, node, metav1.UpdateOptions{})
	if apierrors.IsForbidden(err) {
		c.logf("%s: not marked for replacement (%s): %v", name, reason, err)
		return errRefused
	}
	if err == nil {
		c.logf("%s: marked for replacement: %s", name, reason)
	}
	return err
}

// tooManyUnhealthy is the policy's short-circuit over the cached nodes; it logs when it starts,
// changes or ends, not for every node it holds.
func (c *Controller) tooManyUnhealthy(node *corev1.Node) error {
	var nodes []*corev1.Node
	for _, obj := range c.nodes.List() {
		if n, ok := obj.(*corev1.Node); ok {
			nodes = append(nodes, n)
		}
	}
	where := fmt.Sprintf("pool %s, zone %q", node.Labels[wellknown.PoolLabel], node.Labels[wellknown.ZoneLabel])
	err := c.Policy.TooManyUnhealthy(nodes, node)
	why := ""
	if err != nil {
		why = err.Error()
	}
	if why != c.stopped[where] {
		if why == "" {
			c.logf("marking in %s again: fewer nodes are unhealthy", where)
		} else {
			c.logf("not marking in %s: %s", where, why)
		}
		c.stopped[where] = why
	}
	return err
}

// unmark lifts the mark of a node that recovered: the cordon, the taint, the annotations.
func (c *Controller) unmark(ctx context.Context, name string) error {
	node, err := c.Client.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
	if err != nil || !marked(node) {
		return err
	}
	node.Spec.Unschedulable = false
	node.Spec.Taints = slices.DeleteFunc(node.Spec.Taints, func(t corev1.Taint) bool { return t.Key == brake.ReplaceTaint })
	delete(node.Annotations, wellknown.ReasonAnnotation)
	delete(node.Annotations, wellknown.SinceAnnotation)
	if _, err := c.Client.CoreV1().Nodes().Update(ctx, node, metav1.UpdateOptions{}); err != nil {
		return err
	}
	c.logf("%s: healthy for %s, no longer marked for replacement", name, c.Policy.Grace)
	return nil
}

// setEvacuated cordons the node for maintenance with the reason, or with "" lifts the cordon it
// set. Not a removal: the brake is not asked, the machine comes back.
func (c *Controller) setEvacuated(ctx context.Context, name, reason string) error {
	node, err := c.Client.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		return err
	}
	_, evacuated := node.Annotations[wellknown.EvacuateAnnotation]
	if evacuated == (reason != "") {
		return nil
	}
	if reason == "" {
		delete(node.Annotations, wellknown.EvacuateAnnotation)
		delete(node.Annotations, wellknown.DrainedAnnotation)
		node.Spec.Unschedulable = false
	} else {
		if node.Annotations == nil {
			node.Annotations = map[string]string{}
		}
		node.Annotations[wellknown.EvacuateAnnotation] = reason
		node.Spec.Unschedulable = true
	}
	if _, err := c.Client.CoreV1().Nodes().Update(ctx, node, metav1.UpdateOptions{}); err != nil {
		return err
	}
	if reason == "" {
		c.logf("%s: maintenance over, uncordoned", name)
	} else {
		c.logf("%s: cordoned and draining ahead of maintenance: %s", name, reason)
	}
	return nil
}

// setDrained tells the node's scheduled events watcher that the node it evacuated is empty, so
// the watcher may start the maintenance now instead of at its NotBefore.
func (c *Controller) setDrained(ctx context.Context, name string, now time.Time) error {
	node, err := c.Client.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		return err
	}
	if _, drained := node.Annotations[wellknown.DrainedAnnotation]; drained || node.Annotations[wellknown.EvacuateAnnotation] == "" {
		return nil
	}
	node.Annotations[wellknown.DrainedAnnotation] = now.UTC().Format(time.RFC3339)
	if _, err := c.Client.CoreV1().Nodes().Update(ctx, node, metav1.UpdateOptions{}); err != nil {
		return err
	}
	c.logf("%s: drained ahead of maintenance", name)
	return nil
}

// drain evicts what it can within DrainFor; left says pods remain.
func (c *Controller) drain(ctx context.Context, name string) (left bool, err error) {
	ctx, cancel := context.WithTimeout(ctx, c.DrainFor)
	defer cancel()
	evicted, err := drain.Node(ctx, c.Client, name, c.logf)
	if evicted > 0 {
		c.logf("%s: %d pods evicted", name, evicted)
	}
	if errors.Is(err, context.DeadlineExceeded) {
		return true, nil
	}
	return false, err
}

// handBack removes the machine, then its Node object: in that order a failure leaves the node
// marked and retried, and no kubelet is left running without its Node. The cache may still hold a
// node handed back a moment ago, so the node is read live first: each machine is removed once.
func (c *Controller) handBack(ctx context.Context, cached *corev1.Node, why string) error {
	node, err := c.Client.CoreV1().Nodes().Get(ctx, cached.Name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) || err == nil && node.UID != cached.UID {
		return nil // gone, or a new machine under the name: its own events bring it here
	}
	if err != nil {
		return err
	}
	if err := c.Machines.Remove(ctx, node); err != nil {
		return fmt.Errorf("remove the machine: %w", err)
	}
	err = c.Client.CoreV1().Nodes().Delete(ctx, node.Name, metav1.DeleteOptions{Preconditions: metav1.NewUIDPreconditions(string(node.UID))})
	if err != nil && !apierrors.IsNotFound(err) {
		return err
	}
	c.logf("%s: machine removed (%s)", node.Name, why)
	return nil
}

func (c *Controller) logf(format string, args ...any) {
	if c.Logf != nil {
		c.Logf(format, args...)
	}
}
