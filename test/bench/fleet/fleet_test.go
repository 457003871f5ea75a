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
		// One step of 160 GPU machines: about one creation (2 minutes), with room for this
		// machine's load.
		if s.Name == GrowGPU && s.Hours > 1 {
			t.Errorf("growing the GPU pool took %.2f hours of the model's time, want under one", s.Hours)
		}
		// The autoscaler's reads stay within its share every minute after its restart's, which
		// stays within its share of the burst.
		if r := s.Reads; s.Name == AutoscalerReads && (r == nil || r.First > int(r.Burst) || r.Max > int(r.Share) || r.Median == 0) {
			t.Errorf("the autoscaler's reads a minute: %+v, want within its share, and some", r)
		}
		// A zone's outage is waited out in that zone: nothing of it marked or handed back as the
		// stack runs remediation, because its zone check held the zone's nodes (judging pools
		// alone marked them), while the broken machine of another zone was replaced; the
		// autoscaler halted while the zone was down.
		if u := s.Outage; s.Name == ZoneOutage && (u == nil || u.Shipped.Marked > 0 || u.Shipped.HandedBack > 0 || u.Shipped.Held == 0 ||
			u.Shipped.Repaired != 1 || u.WithoutZones.Marked == 0 || u.Shipped.AutoscalerHalted != OutageMinutes) {
			t.Errorf("the zone's outage: %v, want nothing of the zone marked, the zone held, the machine elsewhere repaired, and the autoscaler halted %d minutes", u, OutageMinutes)
		}
		// The step fills one placement group of 100 and starts one more: a 64-node gang can start.
		if s.Name == GrowGPU && (len(s.Fabrics) != 1 || s.Fabrics[0] != Fabrics{Whole: 1, Partly: 1}) {
			t.Errorf("InfiniBand placement groups after each step of the growth: %+v, want one whole and one partly grown", s.Fabrics)
		}
	}
}
