// Package joins grows a pool in bounded steps (L11): capacity is raised by at most a step of
// nodes, the step's nodes are waited for, then a pause lets the apiservers' queues drain before
// the next. The same stepper drives an Azure scale set (forge grow) and the rehearsal's simulated
// nodes (the joins benchmark).
package joins

import (
	"context"
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/clusterforge/clusterforge/components/spec"
)

// Pace is how a pool grows.
type Pace struct {
	// Step is the most nodes added at once.
	Step int
	// Pause is the wait after a step's nodes joined, before the next step.
	Pause time.Duration
	// StepTimeout is how long a step's nodes may take to join before Grow gives up.
	StepTimeout time.Duration
}

// DefaultStepTimeout matches cluster-autoscaler's default --max-node-provision-time.
const DefaultStepTimeout = 15 * time.Minute

// PaceOf is the stack's pace (spec.Joins).
func PaceOf(c *spec.Cluster) Pace {
	return Pace{Step: c.Joins.Step, Pause: c.Joins.PauseDuration(), StepTimeout: DefaultStepTimeout}
}

// Validate refuses a pace that cannot make progress.
func (p Pace) Validate() error {
	var errs []error
	if p.Step < 1 {
		errs = append(errs, fmt.Errorf("joins: step %d: grow by at least one node at a time", p.Step))
	}
	if p.Pause < 0 {
		errs = append(errs, fmt.Errorf("joins: pause %s is negative", p.Pause))
	}
	if p.StepTimeout <= 0 {
		errs = append(errs, fmt.Errorf("joins: step timeout %s: give each step time to join", p.StepTimeout))
	}
	return errors.Join(errs...)
}

// Steps are the capacities a pool passes through growing from from to to: every step but the
// last adds exactly p.Step nodes. None when to is not above from.
func (p Pace) Steps(from, to int) []int {
	var out []int
	for n := from; n < to; {
		n = min(n+p.Step, to)
		out = append(out, n)
	}
	return out
}

// Pool is what grows: a scale set's capacity and the nodes that joined from it.
type Pool interface {
	// Capacity is the pool's requested instance count.
	Capacity(ctx context.Context) (int, error)
	// SetCapacity requests n instances.
	SetCapacity(ctx context.Context, n int) error
	// Joined counts the pool's nodes that registered and are Ready.
	Joined(ctx context.Context) (int, error)
}

// Plan is the capacities the pool's growth to target goes through, one a step (none when it is
// there), from its capacity now.
func Plan(ctx context.Context, pool Pool, target int, p Pace) (from int, steps []int, err error) {
	if err := p.Validate(); err != nil {
		return 0, nil, err
	}
	from, err = pool.Capacity(ctx)
	if err != nil {
		return 0, nil, fmt.Errorf("joins: reading capacity: %w", err)
	}
	if target < from {
		return 0, nil, fmt.Errorf("joins: the pool has capacity %d, above %d: shrinking is the autoscaler's, under the scale-down brake", from, target)
	}
	return from, p.Steps(from, target), nil
}

// PrintPlan says what Grow would do.
func PrintPlan(w io.Writer, from int, steps []int, p Pace) {
	if len(steps) == 0 {
		fmt.Fprintf(w, "the pool has capacity %d already: nothing to grow\n", from)
		return
	}
	fmt.Fprintf(w, "grow from capacity %d to %d in %d steps of at most %d nodes, each waiting for its nodes to be Ready (at most %s) and %s before the next:\n",
		from, steps[len(steps)-1], len(steps), p.Step, p.StepTimeout, p.Pause)
	for i, n := range steps {
		fmt.Fprintf(w, "  step %d: capacity %d\n", i+1, n)
	}
}

// Grow raises the pool's capacity to the target through p's steps, waiting after each for its
// nodes to join (polled every poll) and then p.Pause. It reports each step on progress.
func Grow(ctx context.Context, pool Pool, target int, p Pace, poll time.Duration, progress io.Writer) error {
	_, steps, err := Plan(ctx, pool, target, p)
	if err != nil {
		return err
	}
	for i, n := range steps {
		began := time.Now()
		if err := pool.SetCapacity(ctx, n); err != nil {
			return fmt.Errorf("joins: step %d of %d, capacity %d: %w", i+1, len(steps), n, err)
		}
		if err := waitJoined(ctx, pool, n, p.StepTimeout, poll); err != nil {
			return fmt.Errorf("joins: step %d of %d, capacity %d: %w", i+1, len(steps), n, err)
		}
		fmt.Fprintf(progress, "==> joins: step %d of %d: %d nodes joined in %s\n", i+1, len(steps), n, time.Since(began).Round(100*time.Millisecond))
		if i < len(steps)-1 {
			if err := sleep(ctx, p.Pause); err != nil {
				return err
			}
		}
	}
	return nil
}

// waitJoined polls until want nodes joined.
func waitJoined(ctx context.Context, pool Pool, want int, timeout, poll time.Duration) error {
	deadline := time.Now().Add(timeout)
	for {
		got, err := pool.Joined(ctx)
		if err == nil && got >= want {
			return nil
		}
		if time.Now().After(deadline) {
			if err != nil {
				return fmt.Errorf("%d nodes did not join within %s: %w", want, timeout, err)
			}
			return fmt.Errorf("%d of %d nodes joined within %s", got, want, timeout)
		}
		if err := sleep(ctx, poll); err != nil {
			return err
		}
	}
}

func sleep(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}
