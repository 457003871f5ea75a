// Command plan shows, offline, what `pulumi up --stack <env>` would create: it runs the real
// program on Pulumi's mock engine and writes build/plan/<env>/{resources.json,machines/<role>/user-data}
// and the admin kubeconfig. The PKI in them is real, kept in build/plan/<env>.pki.json as Pulumi
// state keeps it (reissued when the stack changes what it certifies), so `make boot` can boot the
// user-data as written.
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
	if err := run(*stack, spec.StackFile(*stacks, *stack), *out); err != nil {
		fmt.Fprintln(os.Stderr, "plan:", err)
		os.Exit(1)
	}
}

func run(stack, stackFile, out string) error {
	result, err := plan.WriteStack(stack, stackFile, out)
	if err != nil {
		return err
	}
	result.Summary(os.Stdout)
	fmt.Printf("wrote %[1]s/resources.json, %[1]s/machines/<role>/user-data and %[1]s/kubeconfig\n", filepath.Join(out, stack))
	return nil
}
