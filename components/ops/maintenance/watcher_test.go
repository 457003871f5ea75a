package maintenance

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"github.com/clusterforge/clusterforge/components/wellknown"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"
)

// The watcher starts its VM's own event only once its node carries wellknown.DrainedAnnotation, exactly
// once, and never an event that names other VMs too.
func TestWatcherStartsItsEventOnceTheNodeIsDrained(t *testing.T) {
	const vm = "cf-dev-cpu_4"
	doc := Document{DocumentIncarnation: 1, Events: []Event{
		{EventID: "own", EventType: "Redeploy", EventStatus: "Scheduled", Resources: []string{vm},
			NotBefore: time.Now().Add(15 * time.Minute).UTC().Format(time.RFC1123), EventSource: "Platform"},
		{EventID: "shared", EventType: "Reboot", EventStatus: "Scheduled", Resources: []string{vm, "cf-dev-cpu_5"},
			NotBefore: time.Now().Add(20 * time.Minute).UTC().Format(time.RFC1123), EventSource: "Platform"},
	}}
	var mu sync.Mutex
	var posts []string
	imds := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Metadata") != "true" || r.URL.RequestURI() != Path {
			http.Error(w, "bad request", http.StatusBadRequest)
			return
		}
		if r.Method == http.MethodPost {
			body, _ := io.ReadAll(r.Body)
			mu.Lock()
			posts = append(posts, string(body))
			mu.Unlock()
			return
		}
		_ = json.NewEncoder(w).Encode(doc)
	}))
	defer imds.Close()
	node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "worker-4", Annotations: map[string]string{}}}
	client := fake.NewClientset(node)
	w := &Watcher{Client: client, NodeName: node.Name, VMName: vm, Endpoint: imds.URL, HTTP: imds.Client(), Every: time.Second}
	ctx := context.Background()
	sent := func() []string {
		mu.Lock()
		defer mu.Unlock()
		return append([]string(nil), posts...)
	}

	if err := w.Poll(ctx); err != nil {
		t.Fatal(err)
	}
	if got := sent(); len(got) != 0 {
		t.Fatalf("started before the drain: %v", got)
	}
	node.Annotations[wellknown.DrainedAnnotation] = "2026-11-25T12:00:00Z"
	if _, err := client.CoreV1().Nodes().Update(ctx, node, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := w.Poll(ctx); err != nil {
		t.Fatal(err)
	}
	if got := sent(); len(got) != 0 {
		t.Fatalf("the node was read again within %s: %v", defaultDrainedReadEvery, got)
	}
	w.nodeReadAt = time.Time{} // as if defaultDrainedReadEvery had passed
	for range 2 {
		if err := w.Poll(ctx); err != nil {
			t.Fatal(err)
		}
	}
	if got, want := sent(), []string{`{"StartRequests":[{"EventId":"own"}]}`}; len(got) != 1 || got[0] != want[0] {
		t.Errorf("sent %q, want %q", got, want)
	}
}
