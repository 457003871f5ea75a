package roll

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"
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
