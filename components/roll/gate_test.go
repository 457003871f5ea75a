package roll

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/clusterforge/clusterforge/components/spec"
)

// A gate passes on two validations in a row and waits out a failing one; a cluster that keeps
// failing is refused with its last problem once the timeout has passed.
func TestGateValidatesTwiceInARowWithinTheTimeout(t *testing.T) {
	blip, down := errors.New("apiserver 1 is out of the load balancer's rotation"), errors.New("etcd member 3 is down")
	for _, tc := range []struct {
		name    string
		results []error // what each validation returns; the last repeats
		calls   int
		refused error
	}{
		{"healthy", []error{nil}, 2, nil},
		{"a blip first", []error{blip, nil}, 3, nil},
		{"a blip between two passes", []error{nil, blip, nil}, 4, nil},
		{"never valid", []error{blip, down}, 0, down},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := &Roller{ValidationPause: time.Millisecond, ValidationTimeout: 50 * time.Millisecond}
			calls := 0
			err := r.validateTwice(context.Background(), func(context.Context) error {
				calls++
				return tc.results[min(calls, len(tc.results))-1]
			})
			if tc.refused != nil {
				if !errors.Is(err, tc.refused) || !strings.Contains(err.Error(), "did not validate within 50ms") {
					t.Fatalf("refusal %v, want one naming %v and the timeout", err, tc.refused)
				}
				return
			}
			if err != nil || calls != tc.calls {
				t.Errorf("%v after %d validations, want a pass after %d", err, calls, tc.calls)
			}
		})
	}
}

// A few unready nodes do not hold up a roll; more than maxUnreadyPercentage of the nodes do, each
// named, and a small cluster gets no floor of unready nodes (okUnreadyCount is the autoscaler's).
func TestGateToleratesTheUnreadyTheAutoscalerDoes(t *testing.T) {
	node := func(name string, ready corev1.ConditionStatus) corev1.Node {
		return corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name},
			Status: corev1.NodeStatus{Conditions: []corev1.NodeCondition{{Type: corev1.NodeReady, Status: ready}}}}
	}
	nodes := func(total, unready int) []corev1.Node {
		var out []corev1.Node
		for i := range total {
			status := corev1.ConditionTrue
			if i < unready {
				status = corev1.ConditionUnknown
			}
			out = append(out, node(fmt.Sprintf("n%d", i), status))
		}
		return out
	}
	for _, tc := range []struct {
		name                        string
		ok, percent, total, unready int
		refused                     bool
	}{
		{"all ready", 20, 10, 100, 0, false},
		{"one unready of three, none tolerated", 20, 10, 3, 1, true},
		{"every node of the dev stack unready", 20, 10, 14, 14, true},
		{"one of the dev stack's 14", 20, 10, 14, 1, false},
		{"within the share", 20, 10, 100, 10, false},
		{"past the share, within the autoscaler's count", 20, 10, 100, 11, true},
		{"within the share at 10,000 nodes", 20, 10, 10000, 1000, false},
		{"past the share at 10,000 nodes", 20, 10, 10000, 1001, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := &Roller{Desired: &spec.Cluster{Autoscaler: spec.Autoscaler{OkUnreadyCount: tc.ok, MaxUnreadyPercentage: tc.percent}}, Progress: io.Discard}
			problems := r.unready(nodes(tc.total, tc.unready), time.Now())
			if refused := len(problems) > 0; refused != tc.refused {
				t.Fatalf("%d unready of %d: refused %v (%v), want %v", tc.unready, tc.total, refused, problems, tc.refused)
			}
			if tc.refused && (len(problems) != tc.unready+1 || !strings.Contains(problems[1].Error(), "node n0 is not Ready")) {
				t.Errorf("problems %v, want the count and each unready node", problems)
			}
		})
	}
}
