package joins

import (
	"context"
	"io"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"
)

func TestSteps(t *testing.T) {
	p := Pace{Step: 100}
	for _, tc := range []struct {
		from, to int
		want     []int
	}{
		{0, 250, []int{100, 200, 250}},
		{0, 100, []int{100}},
		{40, 240, []int{140, 240}},
		{5, 5, nil},
		{9, 3, nil},
	} {
		if got := p.Steps(tc.from, tc.to); !slices.Equal(got, tc.want) {
			t.Errorf("Steps(%d, %d) = %v, want %v", tc.from, tc.to, got, tc.want)
		}
	}
}

func TestValidate(t *testing.T) {
	err := Pace{Step: 0, Pause: -time.Second}.Validate()
	for _, want := range []string{"step 0", "pause -1s", "step timeout 0s"} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("Validate() = %v, want it to name %q", err, want)
		}
	}
}

// fakePool joins its requested nodes a poll later; it records the capacity each time a step is asked.
type fakePool struct {
	mu        sync.Mutex
	capacity  int
	joined    int
	requested []int
	// joinedAtRequest is how many nodes had joined when each capacity was requested.
	joinedAtRequest []int
}

func (f *fakePool) Capacity(context.Context) (int, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.capacity, nil
}

func (f *fakePool) SetCapacity(_ context.Context, n int) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.capacity = n
	f.requested = append(f.requested, n)
	f.joinedAtRequest = append(f.joinedAtRequest, f.joined)
	return nil
}

func (f *fakePool) Joined(context.Context) (int, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	got := f.joined
	f.joined = f.capacity // the next poll sees the step joined
	return got, nil
}

func TestGrowWaitsForEachStepBeforeTheNext(t *testing.T) {
	pool := &fakePool{capacity: 20, joined: 20}
	if err := Grow(context.Background(), pool, 270, Pace{Step: 100, StepTimeout: time.Minute}, time.Millisecond, io.Discard); err != nil {
		t.Fatal(err)
	}
	if want := []int{120, 220, 270}; !slices.Equal(pool.requested, want) {
		t.Errorf("capacities requested %v, want %v", pool.requested, want)
	}
	if want := []int{20, 120, 220}; !slices.Equal(pool.joinedAtRequest, want) {
		t.Errorf("nodes joined when each step was asked: %v, want %v (every step waits for the one before)", pool.joinedAtRequest, want)
	}
}

func TestGrowGivesUpOnAStepThatDoesNotJoin(t *testing.T) {
	stuck := &stuckPool{fakePool{capacity: 0}}
	err := Grow(context.Background(), stuck, 300, Pace{Step: 100, StepTimeout: 20 * time.Millisecond}, time.Millisecond, io.Discard)
	if err == nil || !strings.Contains(err.Error(), "step 1 of 3, capacity 100: 0 of 100 nodes joined") {
		t.Fatalf("Grow = %v, want the first step to fail naming its count", err)
	}
	if !slices.Equal(stuck.requested, []int{100}) {
		t.Errorf("capacities requested %v: a failed step must stop the growth", stuck.requested)
	}
}

func TestGrowRefusesToShrink(t *testing.T) {
	pool := &fakePool{capacity: 50}
	if err := Grow(context.Background(), pool, 10, Pace{Step: 100, StepTimeout: time.Minute}, time.Millisecond, io.Discard); err == nil || !strings.Contains(err.Error(), "brake") {
		t.Fatalf("Grow to fewer nodes = %v, want a refusal pointing at the autoscaler and the brake", err)
	}
	if len(pool.requested) != 0 {
		t.Errorf("a refused shrink requested %v", pool.requested)
	}
}

// stuckPool never joins anything.
type stuckPool struct{ fakePool }

func (s *stuckPool) Joined(context.Context) (int, error) { return 0, nil }
