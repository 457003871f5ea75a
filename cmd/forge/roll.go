package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/clusterforge/clusterforge/components/buildinfo"
	"github.com/clusterforge/clusterforge/components/change"
	"github.com/clusterforge/clusterforge/components/roll"
	"github.com/clusterforge/clusterforge/components/spec"
	"github.com/clusterforge/clusterforge/infra/rollazure"
)

// diff prints what the stack file changes against what the stack's Azure cluster last applied
// (`rehearse diff` does the same for a rehearsal).
func diff(dir, stack string) error {
	desired, err := spec.LoadStack(spec.StackFile(dir, stack))
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	target, applied, err := rollazure.Open(ctx, stack, ".", desired, os.Stdout)
	if err != nil {
		return err
	}
	if target.AppliedBy != "" {
		fmt.Printf("stack %s was last applied by clusterforge %s; this forge is %s\n", stack, target.AppliedBy, buildinfo.Version())
	}
	return roll.Diff(ctx, os.Stdout, target, applied, desired, spec.StackFile(dir, stack),
		"Azure (stack "+stack+")", "forge roll --stack "+stack+" --yes")
}

// rollStack rolls the stack's Azure cluster onto the stack file, one stage at a time behind the
// gates, resuming an interrupted roll from its journal. Without yes it shows the stages (diff)
// and changes nothing.
func rollStack(dir, stack string, renew, yes bool) error {
	if !yes {
		return diff(dir, stack)
	}
	desired, err := spec.LoadStack(spec.StackFile(dir, stack))
	if err != nil {
		return err
	}
	ctx := context.Background()
	target, applied, err := rollazure.Open(ctx, stack, ".", desired, os.Stdout)
	if err != nil {
		return err
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
