package fleet

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/clusterforge/clusterforge/components/spec"
)

// The benchmark's smoke run: prod-10k's scale sets at 200 instances, time 600 times faster. Every
// scenario delivers what it offered, with no failed call and no retry before its Retry-After.
func TestFleetSmoke(t *testing.T) {
	c, err := spec.LoadStack(filepath.Join("..", "..", "..", spec.StackDir, "Pulumi.prod-10k.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	got, err := Run(ctx, Options{Stack: "prod-10k", Cluster: c, Scale: 0.02, Speedup: 600, Progress: os.Stderr})
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != len(Scenarios) {
		t.Fatalf("%d scenarios ran, want %d", len(got), len(Scenarios))
	}
	for _, s := range got {
		if !s.Valid || s.Offered == 0 || s.FailedCalls > 0 || s.RetriedEarly > 0 || len(s.Errors) > 0 {
			t.Errorf("%s: %d of %d machines, %d failed calls, %d retried early, errors %v", s.Name, s.Delivered, s.Offered, s.FailedCalls, s.RetriedEarly, s.Errors)
		}
		// One step of 160 GPU machines over 80 scale sets: about one creation (2 minutes), not 80
		// one after another (2.7 hours), with room for this machine's load.
		if s.Name == GrowGPU && s.Hours > 1 {
			t.Errorf("growing the GPU pool took %.2f hours of the model's time, want under one: are its scale sets grown one after another?", s.Hours)
		}
	}
}
