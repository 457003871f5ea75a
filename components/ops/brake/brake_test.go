package brake

import (
	"errors"
	"fmt"
	"testing"
	"time"
)

// fleetOf makes n unmarked nodes named <pool>-<i> in each pool.
func fleetOf(pools map[string]int) Fleet {
	f := Fleet{}
	for pool, n := range pools {
		for i := range n {
			f[fmt.Sprintf("%s-%d", pool, i)] = Present{Pool: pool}
		}
	}
	return f
}

func TestAllowHoldsEachPoolAndTheClusterToHalfPerWindow(t *testing.T) {
	p := DefaultPolicy()
	now := time.Date(2026, 11, 25, 12, 0, 0, 0, time.UTC)
	removed := func(pool string, from, n int, ago time.Duration) []Removal {
		var out []Removal
		for i := from; i < from+n; i++ {
			out = append(out, Removal{Node: fmt.Sprintf("%s-%d", pool, i), Pool: pool, By: "cluster-autoscaler", At: now.Add(-ago)})
		}
		return out
	}
	marked := func(f Fleet, n int) Fleet {
		for i := range n {
			f[fmt.Sprintf("cpu-%d", i)] = Present{Pool: "cpu", Marked: true}
		}
		return f
	}
	gone := func(f Fleet, rs []Removal) Fleet {
		for _, r := range rs {
			delete(f, r.Node)
		}
		return f
	}
	for _, tc := range []struct {
		name      string
		fleet     Fleet
		recent    []Removal
		candidate string
		refused   string // the scope refused, "" when allowed
	}{
		{"first removal", fleetOf(map[string]int{"cpu": 10}), nil, "cpu-0", ""},
		{"the fifth of ten, four marked", fleetOf(map[string]int{"cpu": 10}), removed("cpu", 0, 4, time.Minute), "cpu-9", ""},
		{"the sixth of ten, five marked", fleetOf(map[string]int{"cpu": 10}), removed("cpu", 0, 5, time.Minute), "cpu-9", "cpu"},
		// The five are deleted: the pool counts them still, so the burst cannot shrink its own base.
		{"the sixth of ten, five deleted", gone(fleetOf(map[string]int{"cpu": 10}), removed("cpu", 0, 5, 0)), removed("cpu", 0, 5, time.Minute), "cpu-9", "cpu"},
		{"five marked before the window, still present", marked(fleetOf(map[string]int{"cpu": 10}), 5), nil, "cpu-9", "cpu"},
		{"the window passed", fleetOf(map[string]int{"cpu": 10}), removed("cpu", 0, 5, 10*time.Minute), "cpu-9", ""},
		{"the same node asked again", fleetOf(map[string]int{"cpu": 10}), removed("cpu", 0, 5, time.Minute), "cpu-4", ""},
		{"a one-node pool", fleetOf(map[string]int{"gpu": 1, "cpu": 10}), nil, "gpu-0", ""},
		{"a one-node pool, twice", fleetOf(map[string]int{"gpu": 1, "cpu": 10}), removed("gpu", 0, 1, time.Minute), "gpu-0", ""},
		// One-node pools may each lose their node; the cluster still only half of its nodes.
		{"the cluster's half", fleetOf(map[string]int{"a": 1, "b": 1, "c": 1, "d": 1}), append(removed("a", 0, 1, time.Minute), removed("b", 0, 1, time.Minute)...), "c-0", "cluster"},
		{"within the cluster's half", fleetOf(map[string]int{"a": 1, "b": 1, "c": 1, "d": 1}), removed("a", 0, 1, time.Minute), "c-0", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := p.Allow(now, tc.recent, Removal{Node: tc.candidate, Pool: tc.fleet[tc.candidate].Pool, By: "remediation", At: now}, tc.fleet)
			var refusal *Refusal
			switch {
			case tc.refused == "" && err != nil:
				t.Fatalf("refused: %v", err)
			case tc.refused != "" && !errors.As(err, &refusal):
				t.Fatalf("allowed, want a refusal for %s", tc.refused)
			case tc.refused != "" && refusal.Scope != tc.refused:
				t.Fatalf("refused for %s, want %s: %v", refusal.Scope, tc.refused, err)
			}
		})
	}
}

// A pool that stays unhealthy longer than the window (a 25-minute partition) while remediation
// marks a node a minute: the marked nodes never leave, so the second window admits nothing more.
func TestMarkedNodesCountUntilTheyAreGone(t *testing.T) {
	p := DefaultPolicy()
	fleet := fleetOf(map[string]int{"cpu": 10})
	var recent []Removal
	start := time.Date(2026, 11, 25, 12, 0, 0, 0, time.UTC)
	for minute := range 25 {
		now := start.Add(time.Duration(minute) * time.Minute)
		for name, n := range fleet {
			if n.Marked {
				continue
			}
			if p.Allow(now, recent, Removal{Node: name, Pool: "cpu", By: "remediation", At: now}, fleet) == nil {
				fleet[name] = Present{Pool: "cpu", Marked: true}
				recent = append(p.Prune(now, recent), Removal{Node: name, Pool: "cpu", By: "remediation", At: now})
			}
			break
		}
	}
	marked := 0
	for _, n := range fleet {
		if n.Marked {
			marked++
		}
	}
	if marked != 5 {
		t.Errorf("%d of 10 marked over 25 minutes, want 5", marked)
	}
}

func TestRefusalSaysWhatAndHowToProceed(t *testing.T) {
	now := time.Now()
	f := fleetOf(map[string]int{"cpu": 2})
	err := DefaultPolicy().Allow(now, []Removal{{Node: "cpu-0", Pool: "cpu", At: now}}, Removal{Node: "cpu-1", Pool: "cpu", By: "cluster-autoscaler", At: now}, f)
	want := "scale-down brake: removing cpu-1 (cpu, by cluster-autoscaler) would make 2 of cpu's 2 nodes removed within the window or marked for removal; at most 1 may go (L14). If this is meant, remove them in smaller steps or wait for the window to pass"
	if err == nil || err.Error() != want {
		t.Errorf("got %v\nwant %s", err, want)
	}
}

func TestPruneKeepsTheWindow(t *testing.T) {
	now := time.Now()
	p := DefaultPolicy()
	kept := p.Prune(now, []Removal{{Node: "a", At: now.Add(-11 * time.Minute)}, {Node: "b", At: now.Add(-time.Minute)}, {Node: "c", At: now.Add(-10 * time.Minute)}})
	if len(kept) != 1 || kept[0].Node != "b" {
		t.Errorf("kept %v, want b only", kept)
	}
}

func TestValidateNamesTheField(t *testing.T) {
	for _, p := range []Policy{{MaxFraction: 1, Window: time.Minute}, {MaxFraction: 0, Window: time.Minute}, {MaxFraction: 0.5}} {
		if err := p.Validate(); err == nil {
			t.Errorf("%+v passed Validate", p)
		}
	}
	if err := DefaultPolicy().Validate(); err != nil {
		t.Error(err)
	}
}
