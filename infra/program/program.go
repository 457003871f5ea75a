// Package program is the clusterforge Pulumi program: it loads the stack's cluster spec, refuses
// bad input before registering anything, and builds the cluster. `pulumi up` runs it through
// infra/main.go; `make plan` runs the same function on Pulumi's mock engine.
package program

import (
	"fmt"
	"path/filepath"
	"time"

	"github.com/pulumi/pulumi/sdk/v3/go/pulumi"

	"github.com/clusterforge/clusterforge/components/azure"
	"github.com/clusterforge/clusterforge/components/kube"
	"github.com/clusterforge/clusterforge/components/machine"
	"github.com/clusterforge/clusterforge/components/spec"
)

// Run is the Pulumi program.
func Run(ctx *pulumi.Context) error {
	raw, ok := ctx.GetConfig(spec.ConfigKey)
	if !ok {
		return fmt.Errorf("stack %s has no %s: add the cluster spec to stacks/Pulumi.%s.yaml", ctx.Stack(), spec.ConfigKey, ctx.Stack())
	}
	c, err := spec.ParseConfig(raw)
	if err != nil {
		return inStackFile(ctx, err)
	}
	if !ctx.DryRun() {
		if err := deployable(c); err != nil {
			return err
		}
	}
	if err := machine.Preflight(c); err != nil {
		return err
	}
	cluster, err := azure.NewCluster(ctx, c.Name, &azure.ClusterArgs{Cluster: c, Now: time.Now()})
	if err != nil {
		return err
	}
	addons, err := kube.NewAddons(ctx, c.Name+"-addons", &kube.AddonsArgs{
		Cluster: c, Kubeconfig: cluster.Kubeconfig,
		SubscriptionID: cluster.SubscriptionID, AutoscalerClientID: cluster.AutoscalerClientID,
		BootstrapToken: cluster.BootstrapToken, BootstrapTokenExpires: cluster.BootstrapTokenExpires,
	}, pulumi.DependsOn([]pulumi.Resource{cluster}))
	if err != nil {
		return err
	}
	ctx.Export("addons", addons.Objects)
	ctx.Export("apiEndpoint", cluster.APIEndpoint)
	ctx.Export("kubeconfig", cluster.Kubeconfig)
	ctx.Export("adminSshPrivateKey", cluster.AdminSSHPrivateKey)
	pools := pulumi.Map{}
	for name, p := range cluster.Pools {
		pools[name] = pulumi.Map{"scaleSets": p.ScaleSets, "maxNodes": p.MaxNodes}
	}
	ctx.Export("pools", pools)
	return nil
}

// inStackFile restates a spec error in the stack file's lines: Pulumi hands the program the spec
// as JSON, whose lines nobody can open. It keeps err when the file cannot say more.
func inStackFile(ctx *pulumi.Context, err error) error {
	if ctx.RootDirectory() == "" {
		return err
	}
	path := spec.StackFile(filepath.Join(ctx.RootDirectory(), spec.StackDir), ctx.Stack())
	if _, fileErr := spec.LoadStack(path); fileErr != nil {
		return fileErr
	}
	return err
}

// deployable refuses what `make plan` tolerates but a real deployment cannot use.
func deployable(c *spec.Cluster) error {
	if spec.IsPlaceholderImage(c.ControlPlaneImage) {
		return &spec.FieldError{Field: "controlPlaneImage", Problem: "is the offline placeholder",
			Fix: "set it to the control-plane image version `packer build images/control-plane.pkr.hcl` published"}
	}
	for i, p := range c.Pools {
		if spec.IsPlaceholderImage(p.Image) {
			field := "image"
			if p.IsGPU() {
				field = "gpuImage"
			}
			return &spec.FieldError{Field: fmt.Sprintf("pools[%d].image", i), Problem: "is the offline placeholder",
				Fix: "set it, or the cluster's " + field + ", to the version `packer build images/worker.pkr.hcl` published"}
		}
	}
	return nil
}
