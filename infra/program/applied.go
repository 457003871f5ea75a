package program

import (
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/pulumi/pulumi/sdk/v3/go/pulumi"

	"github.com/clusterforge/clusterforge/components/change"
	"github.com/clusterforge/clusterforge/components/spec"
	"github.com/clusterforge/clusterforge/infra/handoff"
)

// Project is the Pulumi project's name (Pulumi.yaml), which URNs spell.
const Project = handoff.InfrastructureProject

// AppliedOutput is the stack output holding the resolved spec of what runs (spec.Resolved): the
// next run compares the stack file with it.
const AppliedOutput = "appliedSpec"

// AppliedByOutput is the stack output naming the clusterforge that applied it (buildinfo.Version):
// `forge diff` shows it beside its own.
const AppliedByOutput = "appliedBy"

// RollStepKey is the config key `make roll` sets on the runs it makes, as RollStep(step): RollModels
// updates the control plane's models and the add-ons but replaces no etcd VM, and keeps each
// worker pool's model as applied unless ModelsStep names the pool; RollMember+<name> replaces one
// etcd member's VM; RollDone records the roll as applied. Plain `pulumi up` leaves it unset.
const (
	RollStepKey = "clusterforge:rollStep"
	RollModels  = "models"
	RollMember  = "member:"
	RollDone    = "done"
)

// ModelsStep is RollModels with the worker pools whose models move: the canary's pool first, the
// rest once the canary has passed.
func ModelsStep(pools []string) string {
	if len(pools) == 0 {
		return RollModels
	}
	return RollModels + "=" + strings.Join(pools, ",")
}

// heldPools are the worker pools whose scale-set models stay as applied during a roll's step:
// every pool the step does not name, until the roll is done.
func heldPools(c *spec.Cluster, step string) map[string]bool {
	if step == "" || step == RollDone {
		return nil
	}
	var moved []string
	if rest, ok := strings.CutPrefix(step, RollModels+"="); ok {
		moved = strings.Split(rest, ",")
	}
	held := map[string]bool{}
	for _, p := range c.Pools {
		held[p.Name] = !slices.Contains(moved, p.Name)
	}
	return held
}

// rollStepLifetime is how long a step set by `make roll` is honoured: one `pulumi up`'s worth.
// A roll that stops leaves its last step in the stack's config; once it has lapsed, a plain
// `pulumi up` is one, and cannot replace an etcd VM without the roll's gates.
const rollStepLifetime = 30 * time.Minute

// RollStep is the config value of a step, valid from now for rollStepLifetime.
func RollStep(step string, now time.Time) string {
	return step + "@" + now.Add(rollStepLifetime).UTC().Format(time.RFC3339)
}

// activeStep reads a RollStep value: the step while it is valid, "" once lapsed or unset.
func activeStep(value string, now time.Time) (step string, lapsed bool, err error) {
	if value == "" {
		return "", false, nil
	}
	step, until, ok := strings.Cut(value, "@")
	deadline, perr := time.Parse(time.RFC3339, until)
	if !ok || perr != nil {
		return "", false, fmt.Errorf("%s %q: want <step>@<RFC 3339 time>, as `make roll` sets it (remove it: pulumi config rm %s)", RollStepKey, value, RollStepKey)
	}
	if now.After(deadline) {
		return "", true, nil
	}
	return step, false, nil
}

// Previous is what a stack's last apply left (its appliedSpec output) and the roll step a run is
// part of, if any: what `make plan`'s mock engine and `make roll` hand the program.
type Previous struct {
	AppliedSpec string
	RollStep    string
}

// lastApplied reads the applied spec this stack last exported, through a reference to itself;
// nil before the first apply.
func lastApplied(ctx *pulumi.Context) (*spec.Cluster, error) {
	self := fmt.Sprintf("%s/%s/%s", ctx.Organization(), ctx.Project(), ctx.Stack())
	ref, err := pulumi.NewStackReference(ctx, "last-applied", &pulumi.StackReferenceArgs{Name: pulumi.String(self)})
	if err != nil {
		return nil, err
	}
	out, err := ref.GetOutputDetails(AppliedOutput)
	if err != nil {
		return nil, err
	}
	text, _ := out.Value.(string)
	if text == "" {
		return nil, nil
	}
	c, err := spec.ParseResolved([]byte(text))
	if err != nil {
		return nil, fmt.Errorf("stack output %s: %w", AppliedOutput, err)
	}
	return c, nil
}

// guard refuses, before anything is registered, what this run may not apply: a refused change
// always, and a change that needs a roll unless `make roll` is running it. It returns the spec
// to record as applied: the desired one once nothing is left to roll, else the last one.
func guard(stack string, last, desired *spec.Cluster, step string) (*spec.Cluster, error) {
	if last == nil && desired.Versions.WorkersHeld() {
		return nil, fmt.Errorf("versions.kubelet %s holds workers a new cluster does not have yet: remove it, and the worker image's versions with it", desired.Versions.Kubelet)
	}
	if last == nil {
		return desired, nil
	}
	changes := change.Diff(last, desired)
	var refused, rolls []string
	for _, c := range changes {
		switch c.Class {
		case change.Refused:
			refused = append(refused, fmt.Sprintf("%s (%s -> %s): %s", c.Field, c.From, c.To, c.Reason))
		case change.Roll:
			rolls = append(rolls, c.Field)
		}
	}
	if len(refused) > 0 {
		return nil, fmt.Errorf("refused: %s", strings.Join(refused, "; "))
	}
	switch {
	case len(rolls) == 0 || step == RollDone:
		return desired, nil
	case step == "":
		return nil, fmt.Errorf("%s changes what machines run (%s -> roles %v): a plain `pulumi up` would leave them stale "+
			"or replace every etcd VM at once; run `make diff STACK=%s`, then `make roll STACK=%s`",
			strings.Join(rolls, ", "), strings.Join(rolls, ", "), change.RolledRoles(desired, changes), stack, stack)
	}
	return last, nil
}
