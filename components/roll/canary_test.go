package roll

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/clusterforge/clusterforge/components/spec"
)

// modelTarget records the worker models a roll moves.
type modelTarget struct {
	Target
	moves [][]string
}

func (m *modelTarget) MoveWorkerModels(_ context.Context, pools []string) error {
	m.moves = append(m.moves, pools)
	return nil
}

// The first worker batch is the fleet's canary: only its pool's model moves before it; a failed
// canary puts that model back and the roll stops, a passed one moves every pool's and is journaled.
func TestCanaryMovesTheFleetsModelsOnlyOncePassed(t *testing.T) {
	desired := cluster(t, func(c *spec.Cluster) { c.Versions.Kubernetes = spec.PreviousKubernetesVersion })
	for _, canaryErr := range []error{errors.New("node cf-dev-cpu-0 not Ready"), nil} {
		target := &modelTarget{}
		r := &Roller{Target: target, Applied: cluster(t, func(*spec.Cluster) {}), Desired: desired, Journal: filepath.Join(t.TempDir(), "roll.json")}
		r.defaults()
		j, err := r.openJournal()
		if err != nil {
			t.Fatal(err)
		}
		var movedWhenRolled [][]string
		err = r.fleetCanary(context.Background(), j, spec.WorkerRole("cpu"), func() error {
			movedWhenRolled = slices.Clone(target.moves)
			return canaryErr
		})
		want := [][]string{{"cpu"}, nil}
		if canaryErr == nil {
			want = [][]string{{"cpu"}, {"cpu", "gpu"}}
		}
		if fmt.Sprint(movedWhenRolled) != fmt.Sprint(want[:1]) || fmt.Sprint(target.moves) != fmt.Sprint(want) {
			t.Errorf("canary error %v: models moved %v before the canary and %v in all, want %v and %v", canaryErr, movedWhenRolled, target.moves, want[:1], want)
		}
		again, jerr := r.openJournal()
		switch {
		case jerr != nil:
			t.Fatal(jerr)
		case canaryErr != nil && (err == nil || !strings.Contains(err.Error(), "pool cpu's model was put back") || again.WorkerModelsMoved):
			t.Errorf("a failed canary: %v, journal records the models moved: %v", err, again.WorkerModelsMoved)
		case canaryErr == nil && (err != nil || !again.WorkerModelsMoved):
			t.Errorf("a passed canary: %v, journal records the models moved: %v", err, again.WorkerModelsMoved)
		}
	}
}
