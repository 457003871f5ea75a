package brake

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/clusterforge/clusterforge/components/wellknown"
	admissionv1 "k8s.io/api/admission/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
)

// memLedger is a Ledger with the apiserver's optimistic concurrency: a save at a stale version
// fails; broken makes every read fail.
type memLedger struct {
	mu       sync.Mutex
	version  int
	removals []Removal
	broken   error
}

func (l *memLedger) Load(context.Context) ([]Removal, string, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.broken != nil {
		return nil, "", l.broken
	}
	return append([]Removal(nil), l.removals...), strconv.Itoa(l.version), nil
}

func (l *memLedger) Save(_ context.Context, version string, removals []Removal) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if version != strconv.Itoa(l.version) {
		return ErrConflict
	}
	l.version++
	l.removals = removals
	return nil
}

func deleteNode(t *testing.T, name string) *admissionv1.AdmissionRequest {
	raw, err := json.Marshal(corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{wellknown.PoolLabel: "cpu"}}})
	if err != nil {
		t.Fatal(err)
	}
	return &admissionv1.AdmissionRequest{UID: types.UID("u-" + name), Kind: metav1.GroupVersionKind{Version: "v1", Kind: "Node"},
		Name: name, Operation: admissionv1.Delete, OldObject: runtime.RawExtension{Raw: raw}}
}

func TestWebhookAdmitsHalfThePoolUnderConcurrentReviews(t *testing.T) {
	pool := fleetOf(map[string]int{"cpu": 10})
	ledger := &memLedger{}
	var refusals sync.Map
	w := &Webhook{Policy: DefaultPolicy(), Ledger: ledger, Fleet: func() Fleet { return pool }, Now: time.Now,
		Refused: func(r *Refusal) { refusals.Store(r.Candidate.Node, r) }}
	var wg sync.WaitGroup
	allowed := make([]bool, 10)
	for i := range 10 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			allowed[i] = w.Review(context.Background(), deleteNode(t, fmt.Sprintf("cpu-%d", i))).Allowed
		}()
	}
	wg.Wait()
	n := 0
	for i, ok := range allowed {
		if ok {
			n++
		} else if _, told := refusals.Load(fmt.Sprintf("cpu-%d", i)); !told {
			t.Errorf("cpu-%d refused without telling Refused", i)
		}
	}
	// Concurrent reviews that lose a race retry (up to five times), so some may give up with
	// "kept changing"; none may push the pool past its half.
	if n > 5 || len(ledger.removals) != n {
		t.Errorf("%d deletions admitted, %d recorded; want at most 5, each recorded", n, len(ledger.removals))
	}
	if n == 0 {
		t.Error("no deletion admitted")
	}
}

func TestWebhookAdmitsTheSixthOnceTheWindowPassed(t *testing.T) {
	pool := fleetOf(map[string]int{"cpu": 10})
	now := time.Date(2026, 11, 25, 12, 0, 0, 0, time.UTC)
	w := &Webhook{Policy: DefaultPolicy(), Ledger: &memLedger{}, Fleet: func() Fleet { return pool }, Now: func() time.Time { return now }}
	for i := range 5 {
		if r := w.Review(context.Background(), deleteNode(t, fmt.Sprintf("cpu-%d", i))); !r.Allowed {
			t.Fatalf("cpu-%d: %s", i, r.Result.Message)
		}
	}
	sixth := w.Review(context.Background(), deleteNode(t, "cpu-5"))
	if sixth.Allowed || sixth.Result.Code != 403 {
		t.Fatalf("the sixth of ten admitted within the window: %+v", sixth)
	}
	now = now.Add(DefaultPolicy().Window)
	if r := w.Review(context.Background(), deleteNode(t, "cpu-5")); !r.Allowed {
		t.Fatalf("after the window: %s", r.Result.Message)
	}
}

// The same removal reviewed again (a retry, a second update of a marked node, a replay) is
// admitted from the record: one write, however many reviews.
func TestWebhookRecordsARemovalOnce(t *testing.T) {
	pool := fleetOf(map[string]int{"cpu": 10})
	ledger := &memLedger{}
	w := &Webhook{Policy: DefaultPolicy(), Ledger: ledger, Fleet: func() Fleet { return pool }, Now: time.Now}
	for i := range 100 {
		if r := w.Review(context.Background(), deleteNode(t, "cpu-0")); !r.Allowed {
			t.Fatalf("review %d refused: %s", i, r.Result.Message)
		}
	}
	if ledger.version != 1 || len(ledger.removals) != 1 {
		t.Errorf("100 reviews of one removal: %d writes, %d recorded; want 1 and 1", ledger.version, len(ledger.removals))
	}
}

func TestWebhookRecordsNoDryRun(t *testing.T) {
	pool := fleetOf(map[string]int{"cpu": 2})
	ledger := &memLedger{}
	w := &Webhook{Policy: DefaultPolicy(), Ledger: ledger, Fleet: func() Fleet { return pool }, Now: time.Now}
	dry := true
	for i := range 3 {
		req := deleteNode(t, fmt.Sprintf("cpu-%d", i%2))
		req.DryRun = &dry
		if r := w.Review(context.Background(), req); !r.Allowed {
			t.Fatalf("dry run %d refused: %s", i, r.Result.Message)
		}
	}
	if len(ledger.removals) != 0 {
		t.Errorf("dry runs recorded: %+v", ledger.removals)
	}
}

func TestWebhookFailsClosed(t *testing.T) {
	pool := fleetOf(map[string]int{"cpu": 10})
	w := &Webhook{Policy: DefaultPolicy(), Ledger: &memLedger{broken: errors.New("configmap: connection refused")},
		Fleet: func() Fleet { return pool }, Now: time.Now}
	if r := w.Review(context.Background(), deleteNode(t, "cpu-0")); r.Allowed || r.Result.Code != 503 {
		t.Errorf("a removal with the ledger unreadable: %+v", r)
	}
	cordon := deleteNode(t, "cpu-0")
	cordon.Operation = admissionv1.Update
	cordon.Object = cordon.OldObject
	if r := w.Review(context.Background(), cordon); !r.Allowed {
		t.Errorf("an update that removes nothing refused with the ledger down: %+v", r.Result)
	}
}
