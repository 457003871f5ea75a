package roll

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/clusterforge/clusterforge/components/change"
	"github.com/clusterforge/clusterforge/components/spec"
)

// modelTarget records the worker models a roll moves.
type modelTarget struct {
	Target
	moves [][]string
}

func (m *modelTarget) StaleWorkers(context.Context) ([]string, error) { return nil, nil }

func (m *modelTarget) MoveWorkerModels(_ context.Context, pools []string) error {
	m.moves = append(m.moves, pools)
	return nil
}

// The first worker batch is the fleet's canary: only its pool's model moves before it, with those
// of pools a resumed roll rolled already; a failed canary puts its pool's model back and the roll
// stops, a passed one moves every pool's and is journaled.
func TestCanaryMovesTheFleetsModelsOnlyOncePassed(t *testing.T) {
	desired := cluster(t, func(c *spec.Cluster) {
		c.Versions.Kubernetes, c.Versions.Kubelet = spec.PreviousKubernetesVersion, spec.PreviousKubernetesVersion
	})
	plan := change.Plan{Stages: []change.Stage{
		{Role: spec.WorkerRole("gpu"), Kind: change.Workers, Batches: [][]string{{"gpu-0"}, {"gpu-1"}}},
		{Role: spec.WorkerRole("cpu"), Kind: change.Workers, Batches: [][]string{{"cpu-0"}, {"cpu-1"}}},
	}}
	failed := errors.New("node cpu-0 not Ready")
	for _, tc := range []struct {
		name      string
		done      []string // the journal's, as a resumed roll finds it
		canaryErr error
		before    []string   // the pools moved before the canary
		after     [][]string // every move after it
	}{
		{"a failed canary", nil, failed, []string{"cpu"}, [][]string{nil}},
		{"a passed canary", nil, nil, []string{"cpu"}, [][]string{{"cpu", "gpu", "cpu2"}}},
		{"a failed canary of a resumed roll keeps the pool it rolled", []string{"gpu-0", "gpu-1"}, failed, []string{"gpu", "cpu"}, [][]string{{"gpu"}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			target := &modelTarget{}
			r := &Roller{Target: target, Applied: cluster(t, func(*spec.Cluster) {}), Desired: desired, Journal: filepath.Join(t.TempDir(), "roll.json")}
			r.defaults()
			j, err := r.openJournal()
			if err != nil {
				t.Fatal(err)
			}
			j.Done = tc.done
			var movedWhenRolled [][]string
			err = r.fleetCanary(context.Background(), j, plan, spec.WorkerRole("cpu"), func() error {
				movedWhenRolled = slices.Clone(target.moves)
				return tc.canaryErr
			})
			want := append([][]string{tc.before}, tc.after...)
			if fmt.Sprint(movedWhenRolled) != fmt.Sprint(want[:1]) || fmt.Sprint(target.moves) != fmt.Sprint(want) {
				t.Errorf("models moved %v before the canary and %v in all, want %v and %v", movedWhenRolled, target.moves, want[:1], want)
			}
			again, jerr := r.openJournal()
			switch {
			case jerr != nil:
				t.Fatal(jerr)
			case tc.canaryErr != nil && (err == nil || !strings.Contains(err.Error(), "pool cpu's model was put back") || again.WorkerModelsMoved):
				t.Errorf("a failed canary: %v, journal records the models moved: %v", err, again.WorkerModelsMoved)
			case tc.canaryErr == nil && (err != nil || !again.WorkerModelsMoved):
				t.Errorf("a passed canary: %v, journal records the models moved: %v", err, again.WorkerModelsMoved)
			}
		})
	}
}
