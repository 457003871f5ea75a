// Command clusterforge-pulumi is the Pulumi program `pulumi up --stack <env>` runs (Pulumi.yaml:
// main: cmd/clusterforge-pulumi). `forge plan` runs the same program offline on Pulumi's mock engine.
package main

import (
	"github.com/pulumi/pulumi/sdk/v3/go/pulumi"

	"github.com/clusterforge/clusterforge/infra/program"
)

func main() { pulumi.Run(program.Run) }
