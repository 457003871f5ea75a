package scale

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"slices"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"
	"k8s.io/utils/ptr"

	"github.com/clusterforge/clusterforge/components/nodestatus"
	"github.com/clusterforge/clusterforge/components/wellknown"
	"github.com/clusterforge/clusterforge/test/openloop"
	"github.com/clusterforge/clusterforge/test/podsecurity"
)

// Namespaces the benchmark's objects live in.
const (
	BaseNamespace  = "scale-base"
	ChurnNamespace = "scale-churn"
	StormNamespace = "scale-storm"
)

// baseShare is the share of a node's CPU each base pod requests: more than half, so exactly one
// fits on a node and the base Deployment puts a pod on every node.
const baseShare = 0.6

// Load is the steady work the benchmark adds to the nodes' own: a base pod on every node, bound
// to it at creation as a DaemonSet's would be (the stack's controller-manager client, sized for
// its targetNodes, would take most of an hour to create 10,000), pods created by the client at a
// steady rate, placed by the scheduler and deleted once running (the pod start-up SLI, as the
// client's watch sees it), and reads of every SLO class: single nodes, a namespace's pods, every
// node and every pod.
type Load struct {
	cs       *kubernetes.Clientset
	cluster  Cluster
	image    string
	progress io.Writer

	// nodes are the pool's nodes, base the base pods, as the load generator's watches see them.
	nodes, base cache.Store

	mu       sync.Mutex
	sent     map[string]time.Time
	startups []time.Duration
	started  map[string]int
	client   map[string][]time.Duration
	errors   map[string]int
	// churnRate is the pods created a second; periods are each reader's, which Offer may change;
	// neither offers anything until Run.
	churnRate float64
	periods   map[string]time.Duration
	// NodesOnly leaves the nodes without base pods: the lease-only run offers their heartbeats alone.
	NodesOnly bool
}

// The load's operations, as Measured counts them.
const (
	OpCreatePod         = "create pod"
	OpGetNode           = "get node"
	OpListNamespacePods = "list namespace pods"
	OpListNodes         = "list nodes"
	OpListAllPods       = "list all pods"
)

// Readers are the load's reads of every SLO class and their periods, each open-loop.
var Readers = map[string]time.Duration{
	OpGetNode: 200 * time.Millisecond, OpListNamespacePods: 5 * time.Second, OpListNodes: 30 * time.Second, OpListAllPods: time.Minute,
}

// loadInFlight bounds each of the load's operations' outstanding calls: a reader with that many
// waiting has long failed its SLO, and more would only grow the benchmark's own process.
const loadInFlight = 256

// NewLoad creates the benchmark's namespaces and starts watching the pool's nodes and the churned
// pods, as the load generator; image is what its pods run (KWOK runs nothing).
func NewLoad(ctx context.Context, c Cluster, image string, progress io.Writer) (*Load, error) {
	cfg, err := c.LoadConfig()
	if err != nil {
		return nil, err
	}
	cfg.QPS, cfg.Burst = 1000, 2000 // the load is paced here, not by client-go's default 5/s
	protobuf(cfg)
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return nil, err
	}
	first, err := c.Node(0)
	if err != nil {
		return nil, err
	}
	l := &Load{cs: cs, cluster: c, image: image, progress: progress,
		sent: map[string]time.Time{}, started: map[string]int{}, client: map[string][]time.Duration{}, errors: map[string]int{}, periods: map[string]time.Duration{}}
	namespaces := []string{BaseNamespace, ChurnNamespace, StormNamespace}
	for i := range StormNamespaces {
		namespaces = append(namespaces, StormEventNamespace(i))
	}
	for _, ns := range namespaces {
		// The load generator's role was bound just now: each apiserver's authorizer learns of it
		// through its own watch.
		for deadline := time.Now().Add(30 * time.Second); ; {
			_, err = cs.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{})
			if !apierrors.IsForbidden(err) || time.Now().After(deadline) {
				break
			}
			time.Sleep(time.Second)
		}
		if err != nil && !apierrors.IsAlreadyExists(err) {
			return nil, fmt.Errorf("namespace %s: %w", ns, err)
		}
	}
	pool := first.Labels[wellknown.PoolLabel]
	nodeInformers := informers.NewSharedInformerFactoryWithOptions(cs, 0,
		informers.WithTweakListOptions(func(o *metav1.ListOptions) { o.LabelSelector = wellknown.PoolLabel + "=" + pool }))
	nodes := nodeInformers.Core().V1().Nodes().Informer()
	podInformers := informers.NewSharedInformerFactoryWithOptions(cs, 0, informers.WithNamespace(ChurnNamespace))
	pods := podInformers.Core().V1().Pods().Informer()
	if _, err := pods.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(obj any) { l.observe(ctx, obj) },
		UpdateFunc: func(_, obj any) { l.observe(ctx, obj) },
	}); err != nil {
		return nil, err
	}
	baseInformers := informers.NewSharedInformerFactoryWithOptions(cs, 0, informers.WithNamespace(BaseNamespace))
	base := baseInformers.Core().V1().Pods().Informer()
	l.nodes, l.base = nodes.GetStore(), base.GetStore()
	for _, f := range []informers.SharedInformerFactory{nodeInformers, podInformers, baseInformers} {
		f.Start(ctx.Done())
	}
	if !cache.WaitForCacheSync(ctx.Done(), nodes.HasSynced, pods.HasSynced, base.HasSynced) {
		return nil, errors.New("load: the node and pod caches did not sync")
	}
	return l, nil
}

// start counts a call of op sent.
func (l *Load) start(op string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.started[op]++
}

// record adds one client call's latency, or counts its error, under op.
func (l *Load) record(op string, began time.Time, err error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if err != nil {
		l.errors[op]++
		return
	}
	l.client[op] = append(l.client[op], time.Since(began))
}

// observe sees a churned pod on the watch: the first time it is Running is its start-up.
func (l *Load) observe(ctx context.Context, obj any) {
	pod, ok := obj.(*corev1.Pod)
	if !ok || pod.Status.Phase != corev1.PodRunning {
		return
	}
	l.mu.Lock()
	sent, waiting := l.sent[pod.Name]
	if waiting {
		delete(l.sent, pod.Name)
		l.startups = append(l.startups, time.Since(sent))
	}
	l.mu.Unlock()
	if waiting {
		go func() {
			began := time.Now()
			// A graceful delete, which the node's agent (KWOK) completes, as a kubelet does.
			err := l.cs.CoreV1().Pods(ChurnNamespace).Delete(ctx, pod.Name, metav1.DeleteOptions{})
			l.record("delete pod", began, err)
		}()
	}
}

// Measured is what the load measured over a window: pod start-ups, the calls sent per operation,
// and the client's latency per operation and its errors, of the calls that ended in it.
type Measured struct {
	Startups []time.Duration
	Started  map[string]int
	Client   map[string][]time.Duration
	Errors   map[string]int
}

// Take returns what was measured since the last call and starts a new window.
func (l *Load) Take() Measured {
	l.mu.Lock()
	defer l.mu.Unlock()
	w := Measured{Startups: l.startups, Started: l.started, Client: l.client, Errors: l.errors}
	l.startups, l.started, l.client, l.errors = nil, map[string]int{}, map[string][]time.Duration{}, map[string]int{}
	return w
}

// ClientP99 is the window's p99 per operation, in seconds.
func (w Measured) ClientP99() map[string]float64 {
	out := map[string]float64{}
	for op, lat := range w.Client {
		secs := make([]float64, len(lat))
		for i, d := range lat {
			secs[i] = d.Seconds()
		}
		out[op] = QuantileOverTime(0.99, secs)
	}
	return out
}

// readyNodes counts the pool's nodes that are Ready, and how many of those the node lifecycle
// controller still taints not-ready: it lifts the taint of a node it has seen Ready at the pace
// of its client's QPS, which the stack sizes for its targetNodes.
func (l *Load) readyNodes() (ready, tainted int) {
	for _, obj := range l.nodes.List() {
		node, ok := obj.(*corev1.Node)
		if !ok || !nodestatus.IsReady(node) {
			continue
		}
		ready++
		if slices.ContainsFunc(node.Spec.Taints, func(t corev1.Taint) bool { return t.Key == corev1.TaintNodeNotReady }) {
			tainted++
		}
	}
	return ready, tainted
}

// StatusOnTime counts the pool's nodes whose Ready condition was last reported at most
// NodeStatusReport+NodeStatusLate before now, of all of them.
func (l *Load) StatusOnTime(now time.Time) (onTime, nodes int) {
	for _, obj := range l.nodes.List() {
		node, ok := obj.(*corev1.Node)
		if !ok {
			continue
		}
		nodes++
		for _, c := range node.Status.Conditions {
			if c.Type == corev1.NodeReady && now.Sub(c.LastHeartbeatTime.Time) <= NodeStatusReport+NodeStatusLate {
				onTime++
			}
		}
	}
	return onTime, nodes
}

// TaintedNodes counts the Ready nodes still tainted not-ready.
func (l *Load) TaintedNodes() int {
	_, tainted := l.readyNodes()
	return tainted
}

// runningBasePods counts the base pods KWOK reports running.
func (l *Load) runningBasePods() int {
	n := 0
	for _, obj := range l.base.List() {
		if pod, ok := obj.(*corev1.Pod); ok && pod.Status.Phase == corev1.PodRunning {
			n++
		}
	}
	return n
}

// SetNodes registers nodes up to want (at most qps a second, as their kubelets would, under the
// nodes' identity) and, once they are Ready, gives each a base pod bound to it; or deletes the
// nodes beyond want and their pods. It returns when the pool has want Ready nodes clear of the
// not-ready taint, each running its base pod (none when NodesOnly).
func (l *Load) SetNodes(ctx context.Context, have, want, qps int) error {
	cfg, err := l.cluster.NodeConfig()
	if err != nil {
		return err
	}
	cfg.QPS, cfg.Burst = float32(qps), qps
	protobuf(cfg)
	nodes, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return err
	}
	lo, hi := min(have, want), max(have, want)
	// The new nodes' base pods are made once the nodes are Ready, as a DaemonSet's are. Base pods are
	// bound, so they run before the node lifecycle controller lifts the new nodes' not-ready
	// taints; the set-up waits for both, so that a hold measures a settled cluster, not the joins
	// (make bench-joins measures those).
	timeout := 3*time.Minute + time.Duration(hi-lo)*50*time.Millisecond
	ready := func() (int, int) { r, _ := l.readyNodes(); return r, want }
	untainted := func() (int, int) { r, tainted := l.readyNodes(); return r - tainted, want }
	running := func() (int, int) { return l.runningBasePods(), want }
	equal := func(got, want int) bool { return got == want }
	if want > have {
		if err := parallel(lo, hi, func(n int) error { return l.addNode(ctx, nodes, n) }); err != nil {
			return err
		}
		if err := waitFor(ctx, timeout, l.progress, "Ready nodes", ready, equal); err != nil {
			return err
		}
		if !l.NodesOnly {
			if err := parallel(lo, hi, func(n int) error { return l.addBasePod(ctx, n) }); err != nil {
				return err
			}
		}
	} else if err := parallel(lo, hi, func(n int) error { return l.removeNode(ctx, nodes, n) }); err != nil {
		return err
	}
	settled := func(what string, count func() (int, int)) error {
		err := waitFor(ctx, timeout, l.progress, what, count, equal)
		// A shrink follows an overloaded step (the storm's set-up): KWOK brings the last nodes back
		// slowly, and a handful of stragglers changes nothing the storm measures.
		if got, want := count(); err != nil && ctx.Err() == nil && want < have && got*100 >= want*99 {
			fmt.Fprintf(l.progress, "==>   %s: %d of %d after %s; a shrink goes on at 99%%\n", what, got, want, timeout.Round(time.Second))
			return nil
		}
		return err
	}
	if err := settled("Ready nodes", ready); err != nil {
		return err
	}
	if err := settled("Ready nodes clear of the not-ready taint", untainted); err != nil || l.NodesOnly {
		return err
	}
	return settled("running base pods", running)
}

// parallel runs f for every n in [lo, hi) on 16 workers and returns the first error.
func parallel(lo, hi int, f func(n int) error) error {
	work := make(chan int)
	errs := make(chan error, 1)
	var wg sync.WaitGroup
	for range 16 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for n := range work {
				if err := f(n); err != nil {
					select {
					case errs <- fmt.Errorf("node %d: %w", n, err):
					default:
					}
				}
			}
		}()
	}
	for n := lo; n < hi; n++ {
		work <- n
	}
	close(work)
	wg.Wait()
	select {
	case err := <-errs:
		return err
	default:
		return nil
	}
}

// addNode registers node n.
func (l *Load) addNode(ctx context.Context, nodes *kubernetes.Clientset, n int) error {
	node, err := l.cluster.Node(n)
	if err != nil {
		return err
	}
	if _, err := nodes.CoreV1().Nodes().Create(ctx, &node, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return err
	}
	return nil
}

// addBasePod creates node n's base pod, bound to it.
func (l *Load) addBasePod(ctx context.Context, n int) error {
	node, err := l.cluster.Node(n)
	if err != nil {
		return err
	}
	cpu := node.Status.Allocatable.Cpu().MilliValue() * int64(baseShare*100) / 100
	pod := podsecurity.Restricted(&corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "base-" + node.Name, Labels: map[string]string{"app": "scale-base"}},
		Spec: corev1.PodSpec{NodeName: node.Name, Containers: []corev1.Container{{Name: "app", Image: l.image,
			Resources: corev1.ResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceCPU: *resource.NewMilliQuantity(cpu, resource.DecimalSI)}}}}},
	})
	began := time.Now()
	_, err = l.cs.CoreV1().Pods(BaseNamespace).Create(ctx, pod, metav1.CreateOptions{})
	if apierrors.IsAlreadyExists(err) {
		return nil
	}
	l.record("create pod", began, err)
	return err
}

// removeNode deletes node n's base pod, then the node.
func (l *Load) removeNode(ctx context.Context, nodes *kubernetes.Clientset, n int) error {
	node, err := l.cluster.Node(n)
	if err != nil {
		return err
	}
	err = l.cs.CoreV1().Pods(BaseNamespace).Delete(ctx, "base-"+node.Name, metav1.DeleteOptions{GracePeriodSeconds: ptr.To[int64](0)})
	if err != nil && !apierrors.IsNotFound(err) {
		return err
	}
	if err := nodes.CoreV1().Nodes().Delete(ctx, node.Name, metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
		return err
	}
	return nil
}

// Offer sets a reader's period from its next tick on.
func (l *Load) Offer(op string, period time.Duration) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.periods[op] = period
}

func (l *Load) period(op string) time.Duration {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.periods[op]
}

// Offered is each operation the load offers, a second: the churn's creates and each reader's calls.
func (l *Load) Offered() map[string]float64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	out := map[string]float64{}
	if l.churnRate > 0 {
		out[OpCreatePod] = l.churnRate
	}
	for op, p := range l.periods {
		out[op] = float64(time.Second) / float64(p)
	}
	return out
}

// Run puts the steady load on until ctx ends: churnPerSecond pods created and deleted once
// running, and the Readers, each open-loop.
func (l *Load) Run(ctx context.Context, churnPerSecond float64) {
	l.mu.Lock()
	l.churnRate = churnPerSecond
	for op, p := range Readers {
		if _, offered := l.periods[op]; !offered {
			l.periods[op] = p
		}
	}
	l.mu.Unlock()
	go l.churn(ctx, churnPerSecond)
	for _, r := range []struct {
		op   string
		read func(context.Context) error
	}{
		{OpGetNode, func(ctx context.Context) error {
			names := l.nodes.ListKeys()
			if len(names) == 0 {
				return nil
			}
			_, err := l.cs.CoreV1().Nodes().Get(ctx, names[rand.IntN(len(names))], metav1.GetOptions{})
			return err
		}},
		{OpListNamespacePods, func(ctx context.Context) error {
			_, err := l.cs.CoreV1().Pods(ChurnNamespace).List(ctx, metav1.ListOptions{})
			return err
		}},
		// As kubectl lists: pages of 500.
		{OpListNodes, func(ctx context.Context) error {
			return pages(func(o metav1.ListOptions) (string, error) {
				list, err := l.cs.CoreV1().Nodes().List(ctx, o)
				if err != nil {
					return "", err
				}
				return list.Continue, nil
			})
		}},
		{OpListAllPods, func(ctx context.Context) error {
			return pages(func(o metav1.ListOptions) (string, error) {
				list, err := l.cs.CoreV1().Pods("").List(ctx, o)
				if err != nil {
					return "", err
				}
				return list.Continue, nil
			})
		}},
	} {
		openloop.Start(ctx, func() float64 { return float64(time.Second) / float64(l.period(r.op)) }, loadInFlight, func(int) {
			l.start(r.op)
			began := time.Now()
			l.record(r.op, began, r.read(ctx))
		})
	}
}

// pages lists in pages of 500 until the last.
func pages(list func(metav1.ListOptions) (next string, err error)) error {
	o := metav1.ListOptions{Limit: 500}
	for {
		next, err := list(o)
		if err != nil || next == "" {
			return err
		}
		o.Continue = next
	}
}

// churn creates perSecond pods a second, open-loop; observe deletes each once it runs.
func (l *Load) churn(ctx context.Context, perSecond float64) {
	run := time.Now().Unix()
	openloop.Start(ctx, func() float64 { return perSecond }, loadInFlight, func(n int) {
		pod := podsecurity.Restricted(&corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("churn-%d-%d", run, n)},
			Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "app", Image: l.image, Resources: corev1.ResourceRequirements{
				Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("10m"), corev1.ResourceMemory: resource.MustParse("16Mi")},
			}}}},
		})
		l.start(OpCreatePod)
		began := time.Now()
		l.mu.Lock()
		l.sent[pod.Name] = began
		l.mu.Unlock()
		_, err := l.cs.CoreV1().Pods(ChurnNamespace).Create(ctx, pod, metav1.CreateOptions{})
		l.record(OpCreatePod, began, err)
		if err != nil {
			l.mu.Lock()
			delete(l.sent, pod.Name)
			l.mu.Unlock()
		}
	})
}

// protobuf makes a client speak protobuf, as kubelets and controllers do: decoding thousands of
// nodes and pods from JSON costs the benchmark's own process, on the machine it measures, several
// times more CPU.
func protobuf(cfg *rest.Config) {
	cfg.ContentType = "application/vnd.kubernetes.protobuf"
	cfg.AcceptContentTypes = "application/vnd.kubernetes.protobuf,application/json"
}

// every runs f at each tick of period until ctx ends, never two at once.
func every(ctx context.Context, period time.Duration, f func()) {
	t := time.NewTicker(period)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			f()
		}
	}
}

// waitFor polls count until done says so, printing progress every 10 s; it fails after timeout.
func waitFor(ctx context.Context, timeout time.Duration, progress io.Writer, what string, count func() (int, int), done func(got, want int) bool) error {
	deadline := time.Now().Add(timeout)
	lastPrint := time.Now()
	for {
		got, want := count()
		if done(got, want) {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%s: %d of %d after %s", what, got, want, timeout.Round(time.Second))
		}
		if time.Since(lastPrint) >= 10*time.Second {
			fmt.Fprintf(progress, "==>   %s: %d of %d\n", what, got, want)
			lastPrint = time.Now()
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(time.Second):
		}
	}
}
