// Command plan shows, offline, what `pulumi up --stack <env>` would create: it runs the real
// program on Pulumi's mock engine and writes build/plan/<env>/{resources.json,machines/<role>/user-data}.
package main

import (
	"flag"
	"fmt"
	"os"
	"path/filepath"

	"github.com/clusterforge/clusterforge/components/spec"
	"github.com/clusterforge/clusterforge/infra/plan"
)

func main() {
	stack := flag.String("stack", "dev", "stack name: stacks/Pulumi.<stack>.yaml")
	stacks := flag.String("stacks", spec.StackDir, "directory of stack files")
	out := flag.String("out", "build/plan", "output directory; the plan goes to <out>/<stack>")
	flag.Parse()

	result, err := plan.Run(*stack, spec.StackFile(*stacks, *stack))
	if err != nil {
		fmt.Fprintln(os.Stderr, "plan:", err)
		os.Exit(1)
	}
	dir := filepath.Join(*out, *stack)
	if err := result.Write(dir); err != nil {
		fmt.Fprintln(os.Stderr, "plan:", err)
		os.Exit(1)
	}
	result.Summary(os.Stdout)
	fmt.Printf("wrote %s/resources.json and %s/machines/<role>/user-data\n", dir, dir)
}
