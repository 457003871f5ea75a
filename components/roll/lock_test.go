package roll

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"k8s.io/client-go/kubernetes/fake"
)

// A second holder is refused while the first renews, with the first named and the age of its last
// renewal as it was when the lease was read, not when the message is printed.
func TestLockRefusesASecondHolder(t *testing.T) {
	cs := fake.NewClientset()
	ctx := context.Background()
	_, release, err := Lock(ctx, cs, "roll by first")
	if err != nil {
		t.Fatal(err)
	}
	defer release()
	_, _, err = Lock(ctx, cs, "roll by second")
	var locked *ErrLocked
	if !errors.As(err, &locked) || locked.Holder != "roll by first" || locked.Since.IsZero() {
		t.Fatalf("a second Lock: %v, want ErrLocked naming the first holder and its start", err)
	}
	locked.Read = locked.Renewed.Add(5 * time.Second)
	time.Sleep(10 * time.Millisecond)
	if msg := locked.Error(); !strings.Contains(msg, "renewed 5s before it was read") {
		t.Errorf("message %q, want the renewal's age when the lease was read", msg)
	}
}
