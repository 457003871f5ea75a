// Command forge is the operator's CLI for a stack's Azure cluster. Each verb has its own flags;
// the verbs that act on Azure need --stack, and roll and grow only show what they would do until
// given --yes:
//
//	forge plan   [--stack <env>] [--out dir]     what `pulumi up` would create, offline (the real program on Pulumi's mock engine)
//	forge freeze [--stack <env>]                 write the sizes and addresses derived from targetNodes into the stack file
//	forge diff   --stack <env>                   what the stack file changes against what the cluster last applied
//	forge roll   --stack <env> [--renew-certificates] [--yes]   converge the machines onto the stack file, stage by stage
//	forge grow   --stack <env> --pool <name> --to <nodes> [--yes]   raise a pool in the stack's join steps
//	forge retire --stack <env> --confirm <cluster> [--registry-only]   end a deleted cluster on purpose: an empty etcd may then start in its name
//	forge version                                this binary's clusterforge version
//
// A rehearsal on this machine is diffed and rolled by the development CLI (`rehearse diff|roll`).
package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"

	"github.com/clusterforge/clusterforge/components/buildinfo"
	"github.com/clusterforge/clusterforge/components/spec"
)

// verb is one of forge's commands: its flags, registered on its own flag set, and what it runs
// with the stack directory and name.
type verb struct {
	name, summary string
	// azure: it acts on the stack's Azure cluster, so --stack names it, with no default.
	azure bool
	flags func(fs *flag.FlagSet) func(stacks, stack string) error
}

var verbs = []verb{
	{"plan", "what `pulumi up` would create, offline", false, func(fs *flag.FlagSet) func(string, string) error {
		out := fs.String("out", "build/plan", "output directory; the plan goes to <out>/<stack>")
		return func(stacks, stack string) error { return plan(stack, spec.StackFile(stacks, stack), *out) }
	}},
	{"freeze", "write the sizes and addresses derived from targetNodes into the stack file", false, func(*flag.FlagSet) func(string, string) error {
		return func(stacks, stack string) error { return freeze(stacks, stack, os.Stdout) }
	}},
	{"diff", "what the stack file changes against what the cluster last applied", true, func(*flag.FlagSet) func(string, string) error {
		return diff
	}},
	{"roll", "converge the machines onto the stack file, stage by stage (shows the stages without --yes)", true, func(fs *flag.FlagSet) func(string, string) error {
		renew := fs.Bool("renew-certificates", false, "renew every leaf certificate, due or not")
		yes := fs.Bool("yes", false, "roll; without it, show what the roll would do and change nothing")
		return func(stacks, stack string) error { return rollStack(stacks, stack, *renew, *yes) }
	}},
	{"grow", "raise a pool in the stack's join steps (shows the steps without --yes)", true, func(fs *flag.FlagSet) func(string, string) error {
		pool := fs.String("pool", "", "the pool to grow")
		to := fs.Int("to", 0, "the pool's node count to reach")
		yes := fs.Bool("yes", false, "grow; without it, show the steps and change nothing")
		return func(stacks, stack string) error { return grow(stacks, stack, *pool, *to, *yes) }
	}},
	{"retire", "end a deleted cluster on purpose in its birth registry", true, func(fs *flag.FlagSet) func(string, string) error {
		confirm := fs.String("confirm", "", "the cluster's name, typed out")
		registryOnly := fs.Bool("registry-only", false, "the backup account is deleted; retire the births alone")
		return func(stacks, stack string) error { return retire(stacks, stack, *confirm, *registryOnly) }
	}},
}

func main() {
	if err := run(os.Args[1:], os.Stdout, os.Stderr); err != nil {
		var usage usageError
		if errors.As(err, &usage) {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(2)
		}
		fmt.Fprintf(os.Stderr, "forge %s: %v\n", os.Args[1], err)
		os.Exit(1)
	}
}

// usageError is a command line forge cannot run.
type usageError string

func (e usageError) Error() string { return string(e) }

// run runs the command line args (the verb first).
func run(args []string, stdout, stderr io.Writer) error {
	if len(args) == 0 {
		return usageError(usage())
	}
	if args[0] == "version" {
		fmt.Fprintln(stdout, "forge", buildinfo.Version())
		return nil
	}
	i := slices.IndexFunc(verbs, func(v verb) bool { return v.name == args[0] })
	if i < 0 {
		return usageError(fmt.Sprintf("forge: no verb %q\n%s", args[0], usage()))
	}
	v := verbs[i]
	fs := flag.NewFlagSet("forge "+v.name, flag.ContinueOnError)
	fs.SetOutput(stderr)
	stacks := fs.String("stacks", spec.StackDir, "directory of stack files")
	stack, help := "dev", "stack name: stacks/Pulumi.<stack>.yaml"
	if v.azure {
		stack, help = "", help+" (required: the cluster this acts on)"
	}
	name := fs.String("stack", stack, help)
	act := v.flags(fs)
	if err := fs.Parse(args[1:]); err != nil {
		return usageError(err.Error())
	}
	switch {
	case fs.NArg() > 0:
		return usageError(fmt.Sprintf("forge %s: unexpected %q (flags only)", v.name, fs.Arg(0)))
	case *name == "":
		return usageError(fmt.Sprintf("forge %s: --stack is required: it names the Azure cluster this acts on", v.name))
	}
	return act(*stacks, *name)
}

func usage() string {
	var b strings.Builder
	b.WriteString("usage: forge <verb> [flags]; forge <verb> -h lists a verb's flags\n")
	for _, v := range verbs {
		fmt.Fprintf(&b, "  %-7s %s\n", v.name, v.summary)
	}
	b.WriteString("  version this binary's clusterforge version\n")
	return b.String()
}
