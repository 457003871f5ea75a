// Command forge changes a cluster that exists: `freeze` writes the sizes and addresses derived
// from targetNodes into a stack file before its first `pulumi up`; `diff` and `roll` compare and
// converge what runs with what the stack file asks for; `grow` raises a pool in join steps.
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
	renew := cmd.Bool("renew-certificates", false, "roll: renew every leaf certificate, due or not")
	pool := cmd.String("pool", "", "grow: the pool to grow")
	to := cmd.Int("to", 0, "grow: the pool's node count to reach, in the stack's join steps")
	_ = cmd.Parse(os.Args[2:])
	var err error
	switch os.Args[1] {
	case "freeze":
		err = freeze(*stacks, *stack, os.Stdout)
	case "diff":
		err = diff(*stacks, *stack, os.Stdout)
	case "roll":
		err = rollStack(*stacks, *stack, *renew)
	case "grow":
		err = grow(*stacks, *stack, *pool, *to)
	default:
		usage()
	}
	if err != nil {
		fmt.Fprintf(os.Stderr, "forge %s: %v\n", os.Args[1], err)
		os.Exit(1)
	}
}

func usage() {
	fmt.Fprintln(os.Stderr, "usage: forge freeze|diff|roll|grow --stack <env> [--stacks dir] [--renew-certificates] [--pool <name> --to <nodes>]")
	os.Exit(2)
}
