package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"path/filepath"
	"strings"
	"time"

	"github.com/clusterforge/clusterforge/components/change"
	"github.com/clusterforge/clusterforge/components/rehearsal"
	"github.com/clusterforge/clusterforge/components/roll"
	"github.com/clusterforge/clusterforge/components/spec"
)

// rehearsalDir is where `make rehearse` keeps a stack's rehearsal.
func rehearsalDir(stack string) (string, error) {
	return filepath.Abs(filepath.Join("build", "rehearse", stack))
}

// diff prints what the stack file changes against what was last applied, each change classified,
// the roll's stages over the machines running now, and what every machine reports it runs.
func diff(dir, stack string, out io.Writer) error {
	desired, err := spec.LoadStack(spec.StackFile(dir, stack))
	if err != nil {
		return err
	}
	local, err := rehearsalDir(stack)
	if err != nil {
		return err
	}
	if !rehearsal.Running(local) {
		return fmt.Errorf("no rehearsal of %s runs (%s): start it with make rehearse STACK=%s. "+
			"Against Azure, `pulumi preview --stack %s` refuses roll changes the same way; the Azure diff is not built yet", stack, local, stack, stack)
	}
	p, err := rehearsal.Attach(local, filepath.Join(".tools", "bin"))
	if err != nil {
		return err
	}
	applied, err := p.Applied()
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	machines, err := roll.Report(ctx, p, desired)
	if err != nil {
		return err
	}
	var extra []change.Change
	if due, ok := roll.Due(machines, desired, time.Now()); ok {
		extra = append(extra, due)
	}
	inv, err := p.Inventory(ctx)
	if err != nil {
		return err
	}
	plan, planErr := change.NewPlan(applied, desired, inv, extra...)
	fmt.Fprintf(out, "%s against the rehearsal in %s (last applied):\n", spec.StackFile(dir, stack), local)
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
		fmt.Fprintf(out, "no machine is replaced: `make rehearse` (or `pulumi up`) applies it\n\n")
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

// rollStack asks the running rehearsal's supervisor to roll to the stack file.
func rollStack(dir, stack string, renew bool) error {
	local, err := rehearsalDir(stack)
	if err != nil {
		return err
	}
	err = rehearsal.Control(local, rehearsal.Request{Op: "roll", Stack: spec.StackFile(dir, stack), Renew: renew})
	if errors.Is(err, rehearsal.ErrNotRunning) {
		return fmt.Errorf("%w; the Azure executor of make roll is not built yet", err)
	}
	return err
}
