package csrapprover

import "k8s.io/client-go/util/workqueue"

// fairQueue hands out the approver's work one flow at a time, in turn: a caller that writes
// requests in a loop (one pool's join token) waits in its own line, and another pool's join or a
// node's renewal is judged after at most one of its requests. A workqueue.Queue, called under the
// workqueue's lock.
type fairQueue struct {
	// flowOf names the flow of a key: a request's requester.
	flowOf func(key string) string
	lines  map[string][]string
	turns  []string // the flows with keys waiting, the next first
	n      int
}

var _ workqueue.Queue[string] = (*fairQueue)(nil)

func newFairQueue(flowOf func(key string) string) *fairQueue {
	return &fairQueue{flowOf: flowOf, lines: map[string][]string{}}
}

func (q *fairQueue) Touch(string) {}

func (q *fairQueue) Push(key string) {
	flow := q.flowOf(key)
	if len(q.lines[flow]) == 0 {
		q.turns = append(q.turns, flow)
	}
	q.lines[flow] = append(q.lines[flow], key)
	q.n++
}

func (q *fairQueue) Len() int { return q.n }

func (q *fairQueue) Pop() string {
	flow := q.turns[0]
	line := q.lines[flow]
	key := line[0]
	q.turns = q.turns[1:]
	if len(line) == 1 {
		delete(q.lines, flow)
	} else {
		q.lines[flow] = line[1:]
		q.turns = append(q.turns, flow)
	}
	q.n--
	return key
}
