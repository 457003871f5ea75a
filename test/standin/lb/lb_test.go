package lb

import (
	"fmt"
	"path/filepath"
	"sync"
	"testing"
)

// Probes of several backends change their health at once, and each change rewrites the state
// file: however the writes interleave, the file left is the state as it is now.
func TestConcurrentHealthChangesLeaveAReadableStateFile(t *testing.T) {
	lb := &LoadBalancer{StateFile: filepath.Join(t.TempDir(), "lb.json"), Failures: 1,
		healthy: map[string]bool{}, failed: map[string]int{}}
	for i := range 8 {
		lb.Backends = append(lb.Backends, fmt.Sprintf("10.0.0.%d:6443", i))
	}
	for round := range 200 {
		var wg sync.WaitGroup
		for _, b := range lb.Backends {
			wg.Add(1)
			go func() { defer wg.Done(); lb.record(b, round%2 == 0) }()
		}
		wg.Wait()
		state, err := ReadState(lb.StateFile)
		if err != nil {
			t.Fatalf("round %d: %v", round, err)
		}
		for _, s := range state {
			if s.Healthy != (round%2 == 0) {
				t.Fatalf("round %d: the state file says %s healthy=%v after every backend became %v", round, s.Address, s.Healthy, round%2 == 0)
			}
		}
	}
}
