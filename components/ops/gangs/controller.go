package gangs

import (
	"context"
	"encoding/json"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	schedulingv1beta1 "k8s.io/api/scheduling/v1beta1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/workqueue"

	"github.com/clusterforge/clusterforge/components/wellknown"
)

// Controller lifts the gang-room gate from every gated pod of a gang that fits a domain, and
// otherwise says why on its PodGroup. It caches the gated pods alone (by their label, and only what
// it judges of them) and the PodGroups, afresh each time it runs (each term of a leader).
type Controller struct {
	Client  kubernetes.Interface
	Domains []Domain
	// Logf reports each gang lifted or held; may be nil.
	Logf func(format string, args ...any)
	// Resay is how often a held gang's Event is made again, so it outlives the Event's TTL.
	// Default 30 minutes.
	Resay time.Duration

	pods   cache.Indexer
	groups cache.Store
	queue  workqueue.TypedRateLimitingInterface[string]
	mu     sync.Mutex
	// said is, by gang, the reason last written to its PodGroup and when.
	said map[string]said
}

type said struct {
	why string
	at  time.Time
}

// ClientQPS and ClientBurst are the rate of the gate's own client: it lifts each pod of a gang with
// a call of its own, and a gang of 1,000 pods would wait 200 s behind client-go's default 5 a
// second, shared with remediation.
const (
	ClientQPS   = 50
	ClientBurst = 100
)

// byGang indexes gated pods by "<namespace>/<PodGroup>".
const byGang = "gang"

func gangOf(p *corev1.Pod) (string, bool) {
	if p.Spec.SchedulingGroup == nil || p.Spec.SchedulingGroup.PodGroupName == nil {
		return "", false
	}
	return p.Namespace + "/" + *p.Spec.SchedulingGroup.PodGroupName, true
}

// judged keeps of a gated pod what the controller reads: a team's pods, cached cluster-wide, cost
// their placement and requests, not their whole spec.
func judged(obj any) (any, error) {
	p, ok := obj.(*corev1.Pod)
	if !ok {
		return obj, nil
	}
	out := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: p.Name, Namespace: p.Namespace, UID: p.UID, ResourceVersion: p.ResourceVersion}}
	out.Spec.SchedulingGroup, out.Spec.SchedulingGates = p.Spec.SchedulingGroup, p.Spec.SchedulingGates
	out.Spec.NodeSelector, out.Spec.Affinity, out.Spec.Tolerations, out.Spec.Overhead = p.Spec.NodeSelector, p.Spec.Affinity, p.Spec.Tolerations, p.Spec.Overhead
	out.Spec.Resources = p.Spec.Resources
	for _, c := range p.Spec.Containers {
		out.Spec.Containers = append(out.Spec.Containers, corev1.Container{Name: c.Name, Resources: c.Resources})
	}
	for _, c := range p.Spec.InitContainers {
		out.Spec.InitContainers = append(out.Spec.InitContainers, corev1.Container{Name: c.Name, Resources: c.Resources, RestartPolicy: c.RestartPolicy})
	}
	return out, nil
}

// Run works until ctx ends.
func (c *Controller) Run(ctx context.Context) error {
	if c.Resay == 0 {
		c.Resay = 30 * time.Minute
	}
	c.said = map[string]said{}
	ctx, stop := context.WithCancel(ctx)
	defer stop()
	gated := informers.NewSharedInformerFactoryWithOptions(c.Client, 0, informers.WithTweakListOptions(func(o *metav1.ListOptions) {
		o.LabelSelector = wellknown.GangRoomLabel
	}))
	podInformer := gated.Core().V1().Pods().Informer()
	if err := podInformer.SetTransform(judged); err != nil {
		return err
	}
	if err := podInformer.AddIndexers(cache.Indexers{byGang: func(obj any) ([]string, error) {
		if p, ok := obj.(*corev1.Pod); ok {
			if g, ok := gangOf(p); ok {
				return []string{g}, nil
			}
		}
		return nil, nil
	}}); err != nil {
		return err
	}
	all := informers.NewSharedInformerFactory(c.Client, 0)
	groupInformer := all.Scheduling().V1beta1().PodGroups().Informer()
	c.pods, c.groups = podInformer.GetIndexer(), groupInformer.GetStore()
	c.queue = workqueue.NewTypedRateLimitingQueue(workqueue.DefaultTypedControllerRateLimiter[string]())
	defer c.queue.ShutDown()
	enqueuePod := func(obj any) {
		if p, ok := obj.(*corev1.Pod); ok {
			if g, ok := gangOf(p); ok {
				c.queue.Add(g)
			}
		}
	}
	if _, err := podInformer.AddEventHandler(cache.ResourceEventHandlerFuncs{AddFunc: enqueuePod, UpdateFunc: func(_, obj any) { enqueuePod(obj) },
		DeleteFunc: func(obj any) {
			if d, ok := obj.(cache.DeletedFinalStateUnknown); ok {
				obj = d.Obj
			}
			enqueuePod(obj)
		}}); err != nil {
		return err
	}
	enqueueGroup := func(obj any) {
		if pg, ok := obj.(*schedulingv1beta1.PodGroup); ok {
			c.queue.Add(pg.Namespace + "/" + pg.Name)
		}
	}
	if _, err := groupInformer.AddEventHandler(cache.ResourceEventHandlerFuncs{AddFunc: enqueueGroup, UpdateFunc: func(_, obj any) { enqueueGroup(obj) }}); err != nil {
		return err
	}
	gated.Start(ctx.Done())
	all.Start(ctx.Done())
	defer gated.Shutdown()
	defer all.Shutdown()
	if !cache.WaitForCacheSync(ctx.Done(), podInformer.HasSynced, groupInformer.HasSynced) {
		return ctx.Err()
	}
	go func() {
		<-ctx.Done()
		c.queue.ShutDown()
	}()
	for {
		gang, shutdown := c.queue.Get()
		if shutdown {
			return ctx.Err()
		}
		held, err := c.sync(ctx, gang)
		switch {
		case err != nil:
			c.logf("gang %s: %v", gang, err)
			c.queue.AddRateLimited(gang)
		case held:
			c.queue.Forget(gang)
			c.queue.AddAfter(gang, c.Resay)
		default:
			c.queue.Forget(gang)
		}
		c.queue.Done(gang)
	}
}

// sync judges one gang's gated pods; held is true while they stay gated.
func (c *Controller) sync(ctx context.Context, gang string) (held bool, err error) {
	objs, err := c.pods.ByIndex(byGang, gang)
	if err != nil {
		return false, err
	}
	var gated []*corev1.Pod
	for _, o := range objs {
		if p := o.(*corev1.Pod); hasGate(p) {
			gated = append(gated, p)
		}
	}
	if len(gated) == 0 {
		c.mu.Lock()
		delete(c.said, gang)
		c.mu.Unlock()
		return false, nil
	}
	obj, exists, err := c.groups.GetByKey(gang)
	if err != nil {
		return false, err
	}
	if !exists {
		// The scheduler holds pods whose PodGroup is missing; once it is made, they are judged.
		c.say(ctx, gang, nil, "its PodGroup does not exist")
		return true, nil
	}
	pg := obj.(*schedulingv1beta1.PodGroup)
	if v, ok := c.judge(pg, gated); !ok {
		c.say(ctx, gang, pg, v.Why)
		return true, nil
	} else if v.Fits != "" {
		c.logf("gang %s fits gang domain %s: lifting %s from %d pods", gang, v.Fits, wellknown.GangRoomGate, len(gated))
	}
	for _, p := range gated {
		if err := c.lift(ctx, p); err != nil {
			return false, err
		}
	}
	c.mu.Lock()
	delete(c.said, gang)
	c.mu.Unlock()
	return false, nil
}

// judge decides a gang of pg's: one kept within gang domains must fit one; any other (no gang
// policy, or constraints of its own) goes on.
func (c *Controller) judge(pg *schedulingv1beta1.PodGroup, gated []*corev1.Pod) (Verdict, bool) {
	gang := pg.Spec.SchedulingPolicy.Gang
	if gang == nil || !withinDomains(pg) {
		return Verdict{}, true
	}
	v := Fit(c.Domains, gated, int(gang.MinCount)) // every pod it has made, when more: they share one domain
	return v, v.Fits != ""
}

// withinDomains reports whether the PodGroup keeps its gang on one gang domain (the default
// addons.GangDomainPolicy gives it).
func withinDomains(pg *schedulingv1beta1.PodGroup) bool {
	sc := pg.Spec.SchedulingConstraints
	if sc == nil {
		return false
	}
	for _, t := range sc.Topology {
		if t.Key == wellknown.GangDomainLabel {
			return true
		}
	}
	return false
}

func hasGate(p *corev1.Pod) bool {
	for _, g := range p.Spec.SchedulingGates {
		if g.Name == wellknown.GangRoomGate {
			return true
		}
	}
	return false
}

// lift takes the gate and the label off a pod (the admission policy lets clusterforge-ops change
// nothing else of it).
func (c *Controller) lift(ctx context.Context, p *corev1.Pod) error {
	patch, err := json.Marshal(map[string]any{
		"metadata": map[string]any{"labels": map[string]any{wellknown.GangRoomLabel: nil}},
		"spec":     map[string]any{"schedulingGates": []map[string]any{{"$patch": "delete", "name": wellknown.GangRoomGate}}},
	})
	if err != nil {
		return err
	}
	_, err = c.Client.CoreV1().Pods(p.Namespace).Patch(ctx, p.Name, types.StrategicMergePatchType, patch, metav1.PatchOptions{})
	if apierrors.IsNotFound(err) {
		return nil
	}
	return err
}

// say records why a gang waits, when the reason changes and again every Resay: an Event on its
// PodGroup (or, while it has none, the log alone).
func (c *Controller) say(ctx context.Context, gang string, pg *schedulingv1beta1.PodGroup, why string) {
	c.mu.Lock()
	last := c.said[gang]
	fresh := last.why == why && time.Since(last.at) < c.Resay
	if !fresh {
		c.said[gang] = said{why: why, at: time.Now()}
	}
	c.mu.Unlock()
	if fresh {
		return
	}
	c.logf("gang %s waits: %s", gang, why)
	if pg == nil {
		return
	}
	now := metav1.Now()
	ev := &corev1.Event{
		ObjectMeta: metav1.ObjectMeta{GenerateName: pg.Name + ".", Namespace: pg.Namespace},
		InvolvedObject: corev1.ObjectReference{APIVersion: schedulingv1beta1.SchemeGroupVersion.String(), Kind: "PodGroup",
			Namespace: pg.Namespace, Name: pg.Name, UID: pg.UID, ResourceVersion: pg.ResourceVersion},
		Reason: ReasonFitsNoDomain, Message: why, Type: corev1.EventTypeWarning,
		Source:         corev1.EventSource{Component: wellknown.OpsName},
		FirstTimestamp: now, LastTimestamp: now, Count: 1,
	}
	if _, err := c.Client.CoreV1().Events(pg.Namespace).Create(ctx, ev, metav1.CreateOptions{}); err != nil {
		c.logf("gang %s: recording why it waits: %v", gang, err)
	}
}

// ReasonFitsNoDomain is the reason of the Event on a PodGroup whose gang waits at the gate.
const ReasonFitsNoDomain = "GangFitsNoDomain"

func (c *Controller) logf(format string, args ...any) {
	if c.Logf != nil {
		c.Logf(format, args...)
	}
}
