// Package services is the cluster services Pulumi program (project clusterforge-services,
// services/Pulumi.yaml): the add-ons, applied to the cluster the infrastructure stack of the same
// name built (handoff). It reads the same stack file as the infrastructure; `pulumi up` runs it
// through cmd/clusterforge-services.
package services

import (
	"fmt"

	"github.com/pulumi/pulumi/sdk/v3/go/pulumi"
	"github.com/pulumi/pulumi/sdk/v3/go/pulumi/config"

	"github.com/clusterforge/clusterforge/components/spec"
	"github.com/clusterforge/clusterforge/infra/clusteraddons"
	"github.com/clusterforge/clusterforge/infra/handoff"
)

// Project is the services' Pulumi project name, and Dir the folder of the checkout holding its
// Pulumi.yaml.
const (
	Project = "clusterforge-services"
	Dir     = "services"
)

// InfrastructureKey names, in the stack file, the infrastructure stack to read when it is not
// handoff.DefaultReference (another organization's, on Pulumi Cloud).
const InfrastructureKey = Project + ":infrastructure"

// Run is the Pulumi program.
func Run(ctx *pulumi.Context) error {
	raw, ok := ctx.GetConfig(spec.ConfigKey)
	if !ok {
		return fmt.Errorf("stack %s has no %s: add the cluster spec to stacks/Pulumi.%s.yaml", ctx.Stack(), spec.ConfigKey, ctx.Stack())
	}
	c, err := spec.ParseConfig(raw)
	if err != nil {
		return err
	}
	reference := config.Get(ctx, InfrastructureKey)
	if reference == "" {
		reference = handoff.DefaultReference(ctx)
	}
	inf, err := handoff.Read(ctx, reference)
	if err != nil {
		return err
	}
	addons, err := clusteraddons.NewAddons(ctx, c.Name+"-addons", &clusteraddons.AddonsArgs{Cluster: c, Infrastructure: inf})
	if err != nil {
		return err
	}
	ctx.Export("addons", addons.Objects)
	return nil
}
