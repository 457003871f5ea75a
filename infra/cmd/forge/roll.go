package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/clusterforge/clusterforge/components/change"
	"github.com/clusterforge/clusterforge/components/rehearsal"
	"github.com/clusterforge/clusterforge/components/roll"
	"github.com/clusterforge/clusterforge/components/spec"
	"github.com/clusterforge/clusterforge/infra/rollazure"
)

// rehearsalDir is where `make rehearse` keeps a stack's rehearsal.
func rehearsalDir(stack string) (string, error) {
	return filepath.Abs(filepath.Join("build", "rehearse", stack))
}

// diff prints what the stack file changes against what was last applied, each change classified,
// the roll's stages over the machines running now, and what every machine reports it runs. The
// environment is the stack's running rehearsal if there is one, else Azure.
func diff(dir, stack string, out io.Writer) error {
	desired, err := spec.LoadStack(spec.StackFile(dir, stack))
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	obs, applied, where, err := environment(ctx, stack, desired, out)
	if err != nil {
		return err
	}
	machines, err := roll.Report(ctx, obs, desired)
	if err != nil {
		return err
	}
	var extra []change.Change
	if due, ok := roll.Due(machines, desired, time.Now()); ok {
		extra = append(extra, due)
	}
	inv, err := obs.Inventory(ctx)
	if err != nil {
		return err
	}
	plan, planErr := change.NewPlan(applied, desired, inv, extra...)
	fmt.Fprintf(out, "%s against %s (last applied):\n", spec.StackFile(dir, stack), where)
	if len(plan.Changes) == 0 {
		fmt.Fprintln(out, "  no changes")
	}
	for _, c := range plan.Changes {
		fmt.Fprintf(out, "  %s\n", c)
	}
	fmt.Fprintln(out)
	switch {
	case planErr != nil:
		fmt.Fprintf(out, "refused: neither make roll nor pulumi up applies this stack file\n\n")
	case len(plan.Stages) == 0:
		fmt.Fprintf(out, "no machine is replaced: `pulumi up` (or `make rehearse`) applies it\n\n")
	default:
		fmt.Fprintf(out, "make roll STACK=%s replaces, in this order:\n", stack)
		for _, s := range plan.Stages {
			fmt.Fprintf(out, "  %-12s %-12s %s\n", s.Role, s.Kind, formatBatches(s))
		}
		fmt.Fprintln(out)
	}
	roll.PrintMachines(out, machines, time.Now())
	return planErr
}

// environment is where the stack runs: its rehearsal when one runs here, else Azure.
func environment(ctx context.Context, stack string, desired *spec.Cluster, progress io.Writer) (roll.Observer, *spec.Cluster, string, error) {
	local, err := rehearsalDir(stack)
	if err != nil {
		return nil, nil, "", err
	}
	if rehearsal.Running(local) {
		p, err := rehearsal.Attach(local, filepath.Join(".tools", "bin"))
		if err != nil {
			return nil, nil, "", err
		}
		applied, err := p.Applied()
		return p, applied, "the rehearsal in " + local, err
	}
	target, applied, err := rollazure.Open(ctx, stack, ".", desired, progress)
	if err != nil {
		return nil, nil, "", fmt.Errorf("no rehearsal of %s runs here (make rehearse STACK=%s), and Azure: %w", stack, stack, err)
	}
	return target, applied, "Azure (stack " + stack + ")", nil
}

func formatBatches(s change.Stage) string {
	var parts []string
	for _, b := range s.Batches {
		parts = append(parts, strings.Join(b, " "))
	}
	text := strings.Join(parts, " | ")
	if s.Kind == change.EtcdMember {
		text += "  (the leader at the time goes last)"
	}
	return text
}

// rollStack rolls the stack's running rehearsal (through its supervisor, which owns the
// machines) or, when none runs, the Azure cluster.
func rollStack(dir, stack string, renew bool) error {
	local, err := rehearsalDir(stack)
	if err != nil {
		return err
	}
	if rehearsal.Running(local) {
		return rehearsal.Control(local, rehearsal.Request{Op: "roll", Stack: spec.StackFile(dir, stack), Renew: renew})
	}
	desired, err := spec.LoadStack(spec.StackFile(dir, stack))
	if err != nil {
		return err
	}
	ctx := context.Background()
	target, applied, err := rollazure.Open(ctx, stack, ".", desired, os.Stdout)
	if err != nil {
		return fmt.Errorf("no rehearsal of %s runs here, and Azure: %w", stack, err)
	}
	roller := &roll.Roller{Target: target, Applied: applied, Desired: desired, Progress: os.Stdout,
		Journal: filepath.Join("build", "roll", stack+".json")}
	if err := os.MkdirAll(filepath.Dir(roller.Journal), 0o755); err != nil {
		return err
	}
	machines, err := roll.Report(ctx, target, desired)
	if err != nil {
		return err
	}
	if due, ok := roll.Due(machines, desired, time.Now()); ok || renew {
		if !ok {
			due = change.Renewal(desired, "asked for")
		}
		roller.Extra = append(roller.Extra, due)
	}
	_, err = roller.Run(ctx)
	return err
}
