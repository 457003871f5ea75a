package rehearsal_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	admissionv1 "k8s.io/api/admission/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"

	"github.com/clusterforge/clusterforge/components/ops/brake"
	"github.com/clusterforge/clusterforge/components/rehearsal/drills"
	"github.com/clusterforge/clusterforge/components/spec"
)

// The brake's ledger on the real apiserver: a save at a stale resourceVersion is a conflict, so
// webhook replicas racing for the last slots of a pool's budget admit no more than the budget.
func TestBrakeLedgerIsACompareAndSwapOnTheAPIServer(t *testing.T) {
	needRehearsal(t)
	ctx := context.Background()
	cs := clientset(t)
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
		pool[fmt.Sprintf("cpu-%d", i)] = "cpu"
	}
	replica := func() *brake.Webhook {
		return &brake.Webhook{Policy: brake.DefaultPolicy(), Now: time.Now, Fleet: func() brake.Fleet { return pool },
			Ledger: &brake.ConfigMapLedger{Client: cs, Namespace: ns, Name: "brake-pool"}}
	}
	replicas := []*brake.Webhook{replica(), replica()}
	var wg sync.WaitGroup
	admitted := make([]bool, 10)
	for i := range 10 {
		raw, err := json.Marshal(corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("cpu-%d", i), Labels: map[string]string{spec.PoolLabel: "cpu"}}})
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
