// Command clusterforge-services is the cluster services' Pulumi program, which
// `pulumi -C services up --stack <env>` runs (services/Pulumi.yaml: main: ../cmd/clusterforge-services)
// once the infrastructure stack of that name is up.
package main

import (
	"github.com/pulumi/pulumi/sdk/v3/go/pulumi"

	"github.com/clusterforge/clusterforge/infra/services"
)

func main() { pulumi.Run(services.Run) }
