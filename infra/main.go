// Command infra is the Pulumi program `pulumi up --stack <env>` runs (Pulumi.yaml: main: infra/).
package main

import (
	"github.com/pulumi/pulumi/sdk/v3/go/pulumi"

	"github.com/clusterforge/clusterforge/infra/program"
)

func main() { pulumi.Run(program.Run) }
