package remediation

import (
	"context"
	"encoding/json"
	"fmt"
	"sync"
	"testing"
	"time"

	admissionv1 "k8s.io/api/admission/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
	"k8s.io/client-go/tools/cache"

	"github.com/clusterforge/clusterforge/components/ops/brake"
	"github.com/clusterforge/clusterforge/components/wellknown"
)

// A 25-minute outage of part of a pool, on a simulated clock, through the controller and the
// real brake webhook in process. A node's pods are stuck terminating while it is unreachable, so
// drains never finish and marked nodes stay: what holds the marks is the short-circuit and the
// brake's count of marked nodes. After the outage every mark is lifted once its node has been
// healthy for the grace period, and no machine was removed.
func TestAnOutageMarksWhatThePolicyAndTheBrakeAllowAndRecoveryUnmarksIt(t *testing.T) {
	for _, tc := range []struct {
		name         string
		broken       int // of the cpu pool's 10
		maxUnhealthy float64
		wantMarked   int // at most at any minute, and reached
	}{
		{"three machines broken", 3, 0.4, 3},
		{"the pool partitioned: the short-circuit holds every mark", 10, 0.4, 0},
		{"the pool partitioned, the short-circuit off: the brake holds half", 10, 1, 5},
	} {
		t.Run(tc.name, func(t *testing.T) {
			marked, removed := simulateOutage(t, tc.broken, tc.maxUnhealthy)
			peak := 0
			for minute, n := range marked {
				peak = max(peak, n)
				if minute >= 31 && n != 0 {
					t.Errorf("minute %d: %d nodes still marked, healthy since minute 25", minute, n)
				}
			}
			if peak != tc.wantMarked {
				t.Errorf("at most %d nodes marked at once (by minute: %v), want %d", peak, marked, tc.wantMarked)
			}
			if len(removed) > 0 {
				t.Errorf("machines removed: %v", removed)
			}
		})
	}
}

// simulateOutage runs 40 minutes: a cpu pool and a gpu pool of 10 nodes each, broken of the cpu
// nodes Ready=Unknown from minute 0 to 25. It returns the cpu nodes marked at each minute's end
// and the machines removed.
func simulateOutage(t *testing.T, broken int, maxUnhealthy float64) (markedByMinute []int, removed []string) {
	start := time.Date(2026, 11, 25, 12, 0, 0, 0, time.UTC)
	now := start
	var objects []runtime.Object
	for _, pool := range []string{"cpu", "gpu"} {
		for i := range 10 {
			name := fmt.Sprintf("%s-%d", pool, i)
			objects = append(objects, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{wellknown.PoolLabel: pool}}},
				&corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "team", Name: "job-" + name, Finalizers: []string{"test/stuck"},
					DeletionTimestamp: &metav1.Time{Time: start}}, Spec: corev1.PodSpec{NodeName: name}})
		}
	}
	cs := fake.NewClientset(objects...)
	nodes := cache.NewStore(cache.MetaNamespaceKeyFunc)
	refresh := func() {
		list, err := cs.CoreV1().Nodes().List(context.Background(), metav1.ListOptions{})
		if err != nil {
			t.Fatal(err)
		}
		items := make([]any, len(list.Items))
		for i := range list.Items {
			items[i] = &list.Items[i]
		}
		if err := nodes.Replace(items, ""); err != nil {
			t.Fatal(err)
		}
	}
	webhook := &brake.Webhook{Policy: brake.DefaultPolicy(), Now: func() time.Time { return now }, Fleet: brake.FleetOf(nodes), Ledger: &ledger{}}
	nodeResource := schema.GroupVersionResource{Version: "v1", Resource: "nodes"}
	review := func(op admissionv1.Operation, name string, next runtime.Object) error {
		old, err := cs.Tracker().Get(nodeResource, "", name)
		if err != nil {
			return err
		}
		req := &admissionv1.AdmissionRequest{UID: "u", Kind: metav1.GroupVersionKind{Version: "v1", Kind: "Node"}, Name: name, Operation: op}
		if req.OldObject.Raw, err = json.Marshal(old); err != nil {
			return err
		}
		if next != nil {
			if req.Object.Raw, err = json.Marshal(next); err != nil {
				return err
			}
		}
		req.UserInfo.Username = "system:serviceaccount:kube-system:clusterforge-ops"
		if r := webhook.Review(context.Background(), req); !r.Allowed {
			return apierrors.NewForbidden(nodeResource.GroupResource(), name, fmt.Errorf("%s", r.Result.Message))
		}
		return nil
	}
	cs.PrependReactor("update", "nodes", func(a k8stesting.Action) (bool, runtime.Object, error) {
		update := a.(k8stesting.UpdateAction)
		if update.GetSubresource() != "" {
			return false, nil, nil
		}
		obj := update.GetObject()
		err := review(admissionv1.Update, obj.(*corev1.Node).Name, obj)
		return err != nil, nil, err
	})
	cs.PrependReactor("delete", "nodes", func(a k8stesting.Action) (bool, runtime.Object, error) {
		err := review(admissionv1.Delete, a.(k8stesting.DeleteAction).GetName(), nil)
		return err != nil, nil, err
	})

	policy := DefaultPolicy()
	policy.MaxUnhealthy = maxUnhealthy
	if maxUnhealthy == 1 { // the short-circuit off, the zone's too
		policy.ZoneMaxUnhealthy = 1
	}
	machines := &removals{}
	c := &Controller{Client: cs, Policy: policy, Machines: machines, Logf: t.Logf, Now: func() time.Time { return now }, DrainFor: time.Millisecond}
	c.start(nodes)
	ctx := context.Background()
	// Each node's condition is written when it changes: the fake tracker's update is slow.
	written := map[string]bool{}
	ready := func(name string, unreachable bool, up time.Time) {
		if was, ok := written[name]; !ok || was != unreachable {
			setReady(t, cs, nodeResource, name, unreachable, start, up)
			written[name] = unreachable
		}
	}
	for minute := range 40 {
		now = start.Add(time.Duration(minute) * time.Minute)
		for i := range broken {
			ready(fmt.Sprintf("cpu-%d", i), minute < 25, start.Add(25*time.Minute))
		}
		for i := broken; i < 10; i++ {
			ready(fmt.Sprintf("cpu-%d", i), false, start.Add(-time.Hour))
		}
		for i := range 10 {
			ready(fmt.Sprintf("gpu-%d", i), false, start.Add(-time.Hour))
		}
		refresh()
		for _, name := range nodes.ListKeys() {
			if _, err := c.sync(ctx, name); err != nil && err != errRefused {
				t.Fatalf("minute %d: %s: %v", minute, name, err)
			}
			refresh()
		}
		n := 0
		for _, obj := range nodes.List() {
			if node := obj.(*corev1.Node); node.Labels[wellknown.PoolLabel] == "cpu" && marked(node) {
				n++
			}
		}
		markedByMinute = append(markedByMinute, n)
	}
	return markedByMinute, machines.names
}

// setReady writes the node's Ready condition straight to the store (as the kubelet and the node
// lifecycle controller would): Unknown since down if unreachable, else True since up.
func setReady(t *testing.T, cs *fake.Clientset, resource schema.GroupVersionResource, name string, unreachable bool, down, up time.Time) {
	t.Helper()
	obj, err := cs.Tracker().Get(resource, "", name)
	if err != nil {
		t.Fatal(err)
	}
	node := obj.(*corev1.Node).DeepCopy()
	cond := corev1.NodeCondition{Type: corev1.NodeReady, Status: corev1.ConditionTrue, LastTransitionTime: metav1.NewTime(up)}
	if unreachable {
		cond = corev1.NodeCondition{Type: corev1.NodeReady, Status: corev1.ConditionUnknown, LastTransitionTime: metav1.NewTime(down), Message: "partitioned"}
	}
	node.Status.Conditions = []corev1.NodeCondition{cond}
	if err := cs.Tracker().Update(resource, node, ""); err != nil {
		t.Fatal(err)
	}
}

// ledger is the brake's record for one writer (the fake clientset keeps no resourceVersions).
type ledger struct{ removals []brake.Removal }

func (l *ledger) Load(context.Context) ([]brake.Removal, string, error) { return l.removals, "", nil }

func (l *ledger) Save(_ context.Context, _ string, removals []brake.Removal) error {
	l.removals = removals
	return nil
}

type removals struct{ names []string }

func (r *removals) Remove(_ context.Context, n *corev1.Node) error {
	r.names = append(r.names, n.Name)
	return nil
}

// blocking removes a machine only once want removals are under way at once.
type blocking struct {
	mu            sync.Mutex
	inFlight, top int
	all           chan struct{}
	want          int
}

func (b *blocking) Remove(ctx context.Context, _ *corev1.Node) error {
	b.mu.Lock()
	b.inFlight++
	b.top = max(b.top, b.inFlight)
	if b.inFlight == b.want {
		close(b.all)
	}
	b.mu.Unlock()
	defer func() { b.mu.Lock(); b.inFlight--; b.mu.Unlock() }()
	select {
	case <-b.all:
		return nil
	case <-time.After(5 * time.Second):
		return fmt.Errorf("removed alone")
	case <-ctx.Done():
		return ctx.Err()
	}
}

// Machines due for hand-back are removed at once, not one deletion after another: a 5 % fault
// in a 10,000-node fleet is 500 deletions of about a minute each.
func TestHandBacksRunAtOnce(t *testing.T) {
	now := time.Date(2026, 11, 25, 12, 0, 0, 0, time.UTC)
	policy := DefaultPolicy()
	var objects []runtime.Object
	for i := range 3 {
		objects = append(objects, dueForHandBack(fmt.Sprintf("cpu-%d", i), "", policy, now))
	}
	cs := fake.NewClientset(objects...)
	machines := &blocking{all: make(chan struct{}), want: 3}
	c := &Controller{Client: cs, Policy: policy, Machines: machines, Logf: t.Logf, Now: func() time.Time { return now }}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	factory := informers.NewSharedInformerFactory(cs, 0)
	informer := factory.Core().V1().Nodes().Informer()
	factory.Start(ctx.Done())
	done := make(chan error)
	go func() { done <- c.Run(ctx, informer) }()
	for {
		list, err := cs.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if len(list.Items) == 0 {
			break
		}
		if ctx.Err() != nil {
			machines.mu.Lock()
			top := machines.top
			machines.mu.Unlock()
			t.Fatalf("%d nodes left; at most %d removals were under way at once, want 3", len(list.Items), top)
		}
		time.Sleep(10 * time.Millisecond)
	}
	cancel()
	<-done
}

// dueForHandBack is a marked node past the policy's hand-back time.
func dueForHandBack(name string, uid types.UID, policy Policy, now time.Time) *corev1.Node {
	return &corev1.Node{
		ObjectMeta: metav1.ObjectMeta{Name: name, UID: uid, Labels: map[string]string{wellknown.PoolLabel: "cpu"},
			Annotations: map[string]string{wellknown.ReasonAnnotation: "NotReady", wellknown.SinceAnnotation: now.Add(-policy.HandBack - time.Minute).Format(time.RFC3339)}},
		Spec: corev1.NodeSpec{Unschedulable: true, Taints: []corev1.Taint{{Key: brake.ReplaceTaint, Effect: corev1.TaintEffectNoSchedule}}},
		Status: corev1.NodeStatus{Conditions: []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionUnknown,
			LastTransitionTime: metav1.NewTime(now.Add(-policy.HandBack - time.Hour))}}},
	}
}

// A machine is removed once: a node the cache still holds after its hand-back (its deletion not
// yet seen) removes nothing again, nor does a new machine that took its name.
func TestAMachineIsRemovedOnce(t *testing.T) {
	now := time.Date(2026, 12, 2, 12, 0, 0, 0, time.UTC)
	policy := DefaultPolicy()
	cached := dueForHandBack("cpu-0", "first", policy, now)
	for _, tc := range []struct {
		name    string
		live    []runtime.Object
		removed int
	}{
		{"still there", []runtime.Object{cached.DeepCopy()}, 1},
		{"handed back already", nil, 0},
		{"a new machine under its name", []runtime.Object{dueForHandBack("cpu-0", "second", policy, now)}, 0},
	} {
		machines := &removals{}
		c := &Controller{Client: fake.NewClientset(tc.live...), Policy: policy, Machines: machines, Logf: t.Logf, Now: func() time.Time { return now }}
		store := cache.NewStore(cache.MetaNamespaceKeyFunc)
		if err := store.Add(cached); err != nil {
			t.Fatal(err)
		}
		c.start(store)
		if _, err := c.sync(context.Background(), cached.Name); err != nil || len(machines.names) != tc.removed {
			t.Errorf("%s: sync %v, machines removed %v; want %d", tc.name, err, machines.names, tc.removed)
		}
	}
}
