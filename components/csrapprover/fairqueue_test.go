package csrapprover

import (
	"slices"
	"strings"
	"testing"

	"k8s.io/client-go/util/workqueue"
)

// A flood of one flow queued first does not hold up the others: each waits for at most one of
// its keys, and each flow's keys keep their order.
func TestFairQueueTakesFlowsInTurn(t *testing.T) {
	flowOf := func(key string) string { flow, _, _ := strings.Cut(key, "/"); return flow }
	q := workqueue.NewTypedWithConfig(workqueue.TypedQueueConfig[string]{Queue: newFairQueue(flowOf)})
	defer q.ShutDown()
	for i := range 100 {
		q.Add("flood/" + string(rune('a'+i%26)) + string(rune('a'+i/26)))
	}
	q.Add("cpu2/join")
	q.Add("node/renewal")
	q.Add("flood/aa") // already queued: not again
	var got []string
	for q.Len() > 0 {
		key, _ := q.Get()
		got = append(got, key)
		q.Done(key)
	}
	if len(got) != 102 {
		t.Fatalf("%d keys handed out, want 102", len(got))
	}
	if at := slices.Index(got, "cpu2/join"); at > 1 {
		t.Errorf("another flow's join came out %d-th, behind %v", at+1, got[:at])
	}
	if at := slices.Index(got, "node/renewal"); at > 2 {
		t.Errorf("a renewal came out %d-th, behind %v", at+1, got[:at])
	}
	flood := slices.DeleteFunc(slices.Clone(got), func(k string) bool { return !strings.HasPrefix(k, "flood/") })
	if !slices.IsSortedFunc(flood, func(a, b string) int { return strings.Compare(a[7:]+a[6:7], b[7:]+b[6:7]) }) {
		t.Errorf("the flood's keys out of order: %v", flood[:10])
	}
}
