package main

import (
	"fmt"
	"os"
	"path/filepath"

	"github.com/clusterforge/clusterforge/infra/offline"
)

// plan shows, offline, what `pulumi up --stack <env>` would create: it runs the real program on
// Pulumi's mock engine and writes <out>/<env>/{resources.json,machines/<role>/user-data} and the
// admin kubeconfig. The PKI in them is real, kept in <out>/<env>.pki.json as Pulumi state keeps
// it (reissued when the stack changes what it certifies), so `make boot` can boot the user-data
// as written.
func plan(stack, stackFile, out string) error {
	result, err := offline.WriteStack(stack, stackFile, out)
	if err != nil {
		return err
	}
	result.Summary(os.Stdout)
	fmt.Printf("wrote %[1]s/resources.json, %[1]s/machines/<role>/user-data and %[1]s/kubeconfig\n", filepath.Join(out, stack))
	return nil
}
