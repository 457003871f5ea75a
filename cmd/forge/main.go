// Command forge is the operator's CLI for a stack's Azure cluster:
//
//	forge plan   --stack <env> [--out dir]  what `pulumi up` would create, offline (the real program on Pulumi's mock engine)
//	forge freeze --stack <env>              write the sizes and addresses derived from targetNodes into the stack file
//	forge diff   --stack <env>              what the stack file changes against what the cluster last applied
//	forge roll   --stack <env> [--renew-certificates]   converge the machines onto the stack file, stage by stage
//	forge grow   --stack <env> --pool <name> --to <nodes>   raise a pool in the stack's join steps
//	forge retire --stack <env> --confirm <cluster> [--registry-only]   end a deleted cluster on purpose: an empty etcd may then start in its name
//
// A rehearsal on this machine is diffed and rolled by the development CLI (`rehearse diff|roll`).
package main

import (
	"flag"
	"fmt"
	"os"

	"github.com/clusterforge/clusterforge/components/spec"
)

func main() {
	if len(os.Args) < 2 {
		usage()
	}
	cmd := flag.NewFlagSet(os.Args[1], flag.ExitOnError)
	stack := cmd.String("stack", "dev", "stack name: stacks/Pulumi.<stack>.yaml")
	stacks := cmd.String("stacks", spec.StackDir, "directory of stack files")
	out := cmd.String("out", "build/plan", "plan: output directory; the plan goes to <out>/<stack>")
	renew := cmd.Bool("renew-certificates", false, "roll: renew every leaf certificate, due or not")
	pool := cmd.String("pool", "", "grow: the pool to grow")
	to := cmd.Int("to", 0, "grow: the pool's node count to reach, in the stack's join steps")
	confirm := cmd.String("confirm", "", "retire: the cluster's name, typed out")
	registryOnly := cmd.Bool("registry-only", false, "retire: the backup account is deleted; retire the births alone")
	_ = cmd.Parse(os.Args[2:])
	var err error
	switch os.Args[1] {
	case "plan":
		err = plan(*stack, spec.StackFile(*stacks, *stack), *out)
	case "freeze":
		err = freeze(*stacks, *stack, os.Stdout)
	case "diff":
		err = diff(*stacks, *stack)
	case "roll":
		err = rollStack(*stacks, *stack, *renew)
	case "grow":
		err = grow(*stacks, *stack, *pool, *to)
	case "retire":
		err = retire(*stacks, *stack, *confirm, *registryOnly)
	default:
		usage()
	}
	if err != nil {
		fmt.Fprintf(os.Stderr, "forge %s: %v\n", os.Args[1], err)
		os.Exit(1)
	}
}

func usage() {
	fmt.Fprintln(os.Stderr, "usage: forge plan|freeze|diff|roll|grow|retire --stack <env> [--stacks dir] [--out dir] [--renew-certificates] [--pool <name> --to <nodes>] [--confirm <cluster> [--registry-only]]")
	os.Exit(2)
}
