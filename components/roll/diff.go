package roll

import (
	"context"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/clusterforge/clusterforge/components/change"
	"github.com/clusterforge/clusterforge/components/spec"
)

// Diff prints what desired changes against applied (what the environment last applied), each
// change classified, the roll's stages over the machines running now, and what every machine
// reports it runs. where names the environment; rollCommand is how its roll is started. The
// operator CLI (Azure) and the development CLI (a rehearsal) print the same diff.
func Diff(ctx context.Context, out io.Writer, obs Observer, applied, desired *spec.Cluster, stackFile, where, rollCommand string) error {
	machines, err := Report(ctx, obs, desired)
	if err != nil {
		return err
	}
	var extra []change.Change
	if due, ok := Due(machines, desired, time.Now()); ok {
		extra = append(extra, due)
	}
	inv, err := obs.Inventory(ctx)
	if err != nil {
		return err
	}
	plan, planErr := change.NewPlan(applied, desired, inv, extra...)
	fmt.Fprintf(out, "%s against %s (last applied):\n", stackFile, where)
	if len(plan.Changes) == 0 {
		fmt.Fprintln(out, "  no changes")
	}
	for _, c := range plan.Changes {
		fmt.Fprintf(out, "  %s\n", c)
	}
	fmt.Fprintln(out)
	switch {
	case planErr != nil:
		fmt.Fprintf(out, "refused: neither a roll nor pulumi up applies this stack file\n\n")
	case len(plan.Stages) == 0:
		fmt.Fprintf(out, "no machine is replaced: `pulumi up` (or `make rehearse`) applies it\n\n")
	default:
		fmt.Fprintf(out, "%s replaces, in this order:\n", rollCommand)
		for _, s := range plan.Stages {
			fmt.Fprintf(out, "  %-12s %-12s %s\n", s.Role, s.Kind, formatBatches(s))
		}
		fmt.Fprintln(out)
	}
	PrintMachines(out, machines, time.Now())
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
