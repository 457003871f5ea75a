package ops

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	admissionv1 "k8s.io/api/admission/v1"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/util/retry"

	"github.com/clusterforge/clusterforge/components/addons"
	"github.com/clusterforge/clusterforge/components/ops/brake"
	"github.com/clusterforge/clusterforge/components/ops/remediation"
	"github.com/clusterforge/clusterforge/components/wellknown"
	"github.com/clusterforge/clusterforge/test/drills"
	"github.com/clusterforge/clusterforge/test/e2e/framework"
)

// The brake's ledger on the real apiserver: a save at a stale resourceVersion is a conflict, so
// webhook replicas racing for the last slots of a pool's budget admit no more than the budget.
func BrakeLedgerIsACompareAndSwapOnTheAPIServer(t *testing.T) {
	framework.NeedRehearsal(t)
	ctx := context.Background()
	cs := framework.Clientset(t)
	ns := drills.Namespace(t, cs, "drill-brake")
	first := &brake.ConfigMapLedger{Client: cs, Namespace: ns, Name: "brake-ledger"}
	second := &brake.ConfigMapLedger{Client: cs, Namespace: ns, Name: "brake-ledger"}
	now := time.Now().UTC().Truncate(time.Second)
	for _, l := range []*brake.ConfigMapLedger{first, second} {
		if _, v, err := l.Load(ctx); err != nil || v != "" {
			t.Fatalf("empty ledger: version %q, %v", v, err)
		}
	}
	a := []brake.Removal{{Node: "a", Pool: "cpu", By: "x", At: now}}
	if err := first.Save(ctx, "", a); err != nil {
		t.Fatal(err)
	}
	if err := second.Save(ctx, "", []brake.Removal{{Node: "b"}}); !errors.Is(err, brake.ErrConflict) {
		t.Fatalf("a second create: %v, want ErrConflict", err)
	}
	got, v1, err := second.Load(ctx)
	if err != nil || len(got) != 1 || got[0] != a[0] {
		t.Fatalf("loaded %+v, %v; want %+v", got, err, a)
	}
	if err := first.Save(ctx, v1, append(got, brake.Removal{Node: "c", At: now})); err != nil {
		t.Fatal(err)
	}
	if err := second.Save(ctx, v1, append(got, brake.Removal{Node: "d", At: now})); !errors.Is(err, brake.ErrConflict) {
		t.Fatalf("a save at a stale version: %v, want ErrConflict", err)
	}

	pool := brake.Fleet{}
	for i := range 10 {
		pool[fmt.Sprintf("cpu-%d", i)] = brake.Present{Pool: "cpu"}
	}
	replica := func() *brake.Webhook {
		return &brake.Webhook{Policy: brake.DefaultPolicy(), Now: time.Now, Fleet: func() brake.Fleet { return pool },
			Ledger: &brake.ConfigMapLedger{Client: cs, Namespace: ns, Name: "brake-pool"}}
	}
	replicas := []*brake.Webhook{replica(), replica()}
	var wg sync.WaitGroup
	admitted := make([]bool, 10)
	for i := range 10 {
		raw, err := json.Marshal(corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("cpu-%d", i), Labels: map[string]string{wellknown.PoolLabel: "cpu"}}})
		if err != nil {
			t.Fatal(err)
		}
		req := &admissionv1.AdmissionRequest{Kind: metav1.GroupVersionKind{Version: "v1", Kind: "Node"}, Name: fmt.Sprintf("cpu-%d", i),
			Operation: admissionv1.Delete, OldObject: runtime.RawExtension{Raw: raw}}
		wg.Add(1)
		go func() {
			defer wg.Done()
			admitted[i] = replicas[i%2].Review(ctx, req).Allowed
		}()
	}
	wg.Wait()
	n := 0
	for _, ok := range admitted {
		if ok {
			n++
		}
	}
	recorded, _, err := replicas[0].Ledger.Load(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if n == 0 || n > 5 || len(recorded) != n {
		t.Errorf("two replicas admitted %d deletions of a 10-node pool and recorded %d; want 1 to 5, each recorded", n, len(recorded))
	}
}

// recordedRemovals stands in for the machines behind bare Node objects: it records what the
// remediation controller removed.
type recordedRemovals struct {
	mu    sync.Mutex
	nodes []string
}

func (r *recordedRemovals) Remove(_ context.Context, n *corev1.Node) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.nodes = append(r.nodes, n.Name)
	return nil
}

func (r *recordedRemovals) names() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.nodes)
}

// The seeds' cascade (L14, L35) on the rehearsal's apiserver: every node of a pool fails its health
// check at once; the remediation controller wants them all replaced, and the scale-down brake,
// registered as a real admission webhook, lets half of the pool go and holds the rest.
func RemediationCannotEmptyAPoolPastTheBrake(t *testing.T) {
	framework.NeedRehearsal(t)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	cs := framework.Clientset(t)
	ns := drills.Namespace(t, cs, "drill-remediation")
	const pool, size = "drill-brake", 10
	selector := wellknown.PoolLabel + "=" + pool

	factory := informers.NewSharedInformerFactoryWithOptions(cs, 0, informers.WithTweakListOptions(func(o *metav1.ListOptions) { o.LabelSelector = selector }))
	nodeInformer := factory.Core().V1().Nodes().Informer()
	var refusals atomic.Int32
	webhook := &brake.Webhook{Policy: brake.DefaultPolicy(), Now: time.Now,
		Ledger:  &brake.ConfigMapLedger{Client: cs, Namespace: ns, Name: "brake-ledger"},
		Refused: func(*brake.Refusal) { refusals.Add(1) },
		Fleet:   brake.FleetOf(nodeInformer.GetStore())}
	server := serveWebhook(t, webhook)

	var names []string
	for i := range size {
		name := fmt.Sprintf("%s-%d", pool, i)
		names = append(names, name)
		if _, err := cs.CoreV1().Nodes().Create(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{wellknown.PoolLabel: pool}}}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	t.Cleanup(func() {
		for _, name := range names {
			_ = cs.CoreV1().Nodes().Delete(context.Background(), name, metav1.DeleteOptions{})
		}
	})
	fail := admissionregistrationv1.Fail
	sideEffects := admissionregistrationv1.SideEffectClassNoneOnDryRun
	config := &admissionregistrationv1.ValidatingWebhookConfiguration{
		ObjectMeta: metav1.ObjectMeta{Name: "drill-scale-down-brake"},
		Webhooks: []admissionregistrationv1.ValidatingWebhook{{
			Name:                    "scale-down-brake.clusterforge.io",
			ClientConfig:            server.Client,
			Rules:                   []admissionregistrationv1.RuleWithOperations{{Operations: []admissionregistrationv1.OperationType{admissionregistrationv1.Update, admissionregistrationv1.Delete}, Rule: admissionregistrationv1.Rule{APIGroups: []string{""}, APIVersions: []string{"v1"}, Resources: []string{"nodes"}}}},
			ObjectSelector:          &metav1.LabelSelector{MatchLabels: map[string]string{wellknown.PoolLabel: pool}},
			MatchConditions:         addons.BrakeMatchConditions,
			FailurePolicy:           &fail,
			SideEffects:             &sideEffects,
			AdmissionReviewVersions: []string{"v1"},
		}},
	}
	if _, err := cs.AdmissionregistrationV1().ValidatingWebhookConfigurations().Create(ctx, config, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cs.AdmissionregistrationV1().ValidatingWebhookConfigurations().Delete(context.Background(), config.Name, metav1.DeleteOptions{})
	})
	// Dry-run deletes are reviewed, never recorded.
	server.awaitRegistered(t, func(int) {
		_ = cs.CoreV1().Nodes().Delete(ctx, names[0], metav1.DeleteOptions{DryRun: []string{metav1.DryRunAll}})
	})

	// Every node fails its health check, as all did in the seeds' etcd-full cascade.
	// The controller-manager's node lifecycle controller taints the new nodes meanwhile: an update
	// that lost that race is made again on the node as it is now.
	for _, name := range names {
		if err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
			n, err := cs.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
			if err != nil {
				return err
			}
			n.Status.Conditions = []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionFalse, Reason: "DrillHealthCheckFailed",
				Message: "the drill failed every node's health check", LastTransitionTime: metav1.NewTime(time.Now().Add(-10 * time.Minute)), LastHeartbeatTime: metav1.Now()}}
			_, err = cs.CoreV1().Nodes().UpdateStatus(ctx, n, metav1.UpdateOptions{})
			return err
		}); err != nil {
			t.Fatal(err)
		}
	}
	machines := &recordedRemovals{}
	policy := remediation.DefaultPolicy()
	policy.Grace = time.Minute
	policy.MaxUnhealthy, policy.ZoneMaxUnhealthy = 1, 1 // the short-circuits off: this drill is the brake's
	controller := &remediation.Controller{Client: cs, Policy: policy, Machines: machines, Logf: t.Logf}
	factory.Start(ctx.Done())
	done := make(chan error, 1)
	go func() { done <- controller.Run(ctx, nodeInformer) }()
	defer func() {
		cancel()
		<-done
	}()

	var left *corev1.NodeList
	var err error
	if err := drills.WaitUntil(time.Minute, func() error {
		if left, err = cs.CoreV1().Nodes().List(ctx, metav1.ListOptions{LabelSelector: selector}); err != nil {
			return err
		}
		if len(left.Items) > size/2 || int(refusals.Load()) < size/2 {
			return fmt.Errorf("%d nodes left, %d refusals", len(left.Items), refusals.Load())
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	time.Sleep(5 * time.Second) // a controller that ignored the brake would go on removing
	if left, err = cs.CoreV1().Nodes().List(ctx, metav1.ListOptions{LabelSelector: selector}); err != nil {
		t.Fatal(err)
	}
	removed := machines.names()
	if len(left.Items) != size/2 || len(removed) != size/2 {
		t.Fatalf("%d of %d nodes left and %d machines removed; the brake allows %d to go", len(left.Items), size, len(removed), size/2)
	}
	for _, n := range left.Items {
		if n.Spec.Unschedulable || slices.ContainsFunc(n.Spec.Taints, func(t corev1.Taint) bool { return t.Key == brake.ReplaceTaint }) {
			t.Errorf("%s was marked though the brake refused it", n.Name)
		}
	}
	t.Logf("%d nodes failed their health check: %d removed (%v), %d held by the brake (%d refusals)", size, len(removed), removed, len(left.Items), refusals.Load())

	// An operator may still remove a held node on purpose: as the admin it is refused like the
	// controller; impersonating the break-glass group, it passes by the brake (and the audit log
	// names who did).
	held := left.Items[0].Name
	if err := cs.CoreV1().Nodes().Delete(ctx, held, metav1.DeleteOptions{}); err == nil || !strings.Contains(err.Error(), "scale-down-brake.clusterforge.io") {
		t.Errorf("the admin deleting %s past the brake: %v, want the brake's refusal", held, err)
	}
	operator := framework.As(t, rest.ImpersonationConfig{UserName: "drill-operator", Groups: []string{wellknown.BreakGlassGroup}})
	if err := operator.CoreV1().Nodes().Delete(ctx, held, metav1.DeleteOptions{}); err != nil {
		t.Errorf("the operator breaking glass to delete %s: %v", held, err)
	}
}
