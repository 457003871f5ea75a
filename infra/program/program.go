// Package program is the clusterforge Pulumi program: it loads the stack's cluster spec, refuses
// bad input before registering anything, and builds the cluster. `pulumi up` runs it through
// cmd/clusterforge-pulumi; `forge plan` (make plan) runs the same function on Pulumi's mock engine.
package program

import (
	"fmt"
	"path/filepath"
	"strings"
	"time"

	"github.com/pulumi/pulumi/sdk/v3/go/pulumi"

	"github.com/clusterforge/clusterforge/components/addons"
	"github.com/clusterforge/clusterforge/components/azurecloud"
	"github.com/clusterforge/clusterforge/components/buildinfo"
	"github.com/clusterforge/clusterforge/components/machine"
	"github.com/clusterforge/clusterforge/components/pki"
	"github.com/clusterforge/clusterforge/components/spec"
	"github.com/clusterforge/clusterforge/infra/azure"
	"github.com/clusterforge/clusterforge/infra/handoff"
)

// Run is the Pulumi program.
func Run(ctx *pulumi.Context) error {
	_, err := Build(ctx)
	return err
}

// Build registers the cluster and exports its outputs; it returns the handoff to the services
// stack (handoff.Infrastructure), which `make plan` hands the services program.
func Build(ctx *pulumi.Context) (pulumi.AnyOutput, error) {
	none := pulumi.AnyOutput{}
	raw, ok := ctx.GetConfig(spec.ConfigKey)
	if !ok {
		return none, fmt.Errorf("stack %s has no %s: add the cluster spec to stacks/Pulumi.%s.yaml", ctx.Stack(), spec.ConfigKey, ctx.Stack())
	}
	c, err := spec.ParseConfig(raw)
	if err != nil {
		return none, inStackFile(ctx, err)
	}
	if !ctx.DryRun() {
		if err := deployable(c, ctx.Stack()); err != nil {
			return none, err
		}
	}
	if err := fitsTheHub(ctx, c); err != nil {
		return none, err
	}
	if err := imagesCarryTheVersions(ctx, c); err != nil {
		return none, err
	}
	if err := machine.Preflight(c); err != nil {
		return none, err
	}
	last, err := lastApplied(ctx)
	if err != nil {
		return none, err
	}
	value, _ := ctx.GetConfig(RollStepKey)
	step, lapsed, err := activeStep(value, time.Now())
	if err != nil {
		return none, err
	}
	if lapsed {
		_ = ctx.Log.Warn(fmt.Sprintf("%s %q has lapsed (a roll stopped there): this run is a plain `pulumi up`", RollStepKey, value), nil)
	}
	record, err := guard(ctx.Stack(), last, c, step)
	if err != nil {
		return none, err
	}
	resolved, err := record.Resolved()
	if err != nil {
		return none, err
	}
	ctx.Export(AppliedOutput, pulumi.String(resolved))
	ctx.Export(AppliedByOutput, pulumi.String(buildinfo.Version()))
	replacing, _ := strings.CutPrefix(step, RollMember)
	if replacing == step {
		replacing = ""
	}
	cluster, err := azure.NewCluster(ctx, c.Name, &azure.ClusterArgs{
		Cluster: c, Now: time.Now(), Replacing: replacing, Applied: last, Held: heldPools(c, step),
	})
	if err != nil {
		return none, err
	}
	services := Handoff(cluster)
	handoff.Export(ctx, services)
	ctx.Export("apiEndpoint", cluster.APIEndpoint)
	ctx.Export("kubeconfig", cluster.Kubeconfig)
	ctx.Export("etcdClient", cluster.EtcdClient)
	ctx.Export("subscriptionId", cluster.SubscriptionID)
	ctx.Export("adminSshPrivateKey", cluster.AdminSSHPrivateKey)
	pools := pulumi.Map{}
	for name, p := range cluster.Pools {
		pools[name] = pulumi.Map{"scaleSets": p.ScaleSets, "maxNodes": p.MaxNodes}
	}
	ctx.Export("pools", pools)
	return services, nil
}

// Handoff is what the cluster services stack reads of this one (an Output of handoff.Infrastructure):
// the admin kubeconfig, the workloads' identities, the webhooks' pair and the join tokens' seed.
func Handoff(cluster *azure.Cluster) pulumi.AnyOutput {
	inputs := []any{cluster.Kubeconfig, cluster.SubscriptionID, cluster.TenantID, cluster.JoinSeed, cluster.PKI}
	for _, w := range addons.AzureWorkloads {
		inputs = append(inputs, cluster.ClientIDs[w])
	}
	return pulumi.All(inputs...).ApplyT(func(v []any) handoff.Infrastructure {
		bundle := v[4].(pki.Bundle)
		ops := bundle.Pair(pki.OpsWebhook)
		d := addons.Deployed{
			Azure:            addons.Azure{SubscriptionID: v[1].(string), TenantID: v[2].(string), Cloud: azurecloud.Public, ClientIDs: map[string]string{}},
			WebhookServingCA: bundle.Pair(pki.WebhookServingCA).CertPEM, OpsWebhookCert: ops.CertPEM, OpsWebhookKey: ops.KeyPEM,
			WebhookClientCA: bundle.Pair(pki.WebhookClientCA).CertPEM,
			JoinSeed:        v[3].(string), BootstrapTokenExpires: cluster.BootstrapTokenExpires,
		}
		for i, w := range addons.AzureWorkloads {
			d.ClientIDs[w] = v[5+i].(string)
		}
		return handoff.Infrastructure{Kubeconfig: v[0].(string), Deployed: d}
	}).(pulumi.AnyOutput)
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

// fitsTheHub refuses a cluster whose address space overlaps another stack's on the same hub
// (Azure would refuse the second peering halfway through the apply), or whose VNets with theirs
// pass the hub's peered group.
func fitsTheHub(ctx *pulumi.Context, c *spec.Cluster) error {
	if ctx.RootDirectory() == "" {
		return nil
	}
	others, err := spec.LoadSiblings(filepath.Join(ctx.RootDirectory(), spec.StackDir), ctx.Stack())
	if err != nil {
		return fmt.Errorf("checking the stacks beside this one on its hub: %w", err)
	}
	return spec.CheckHub(c, others)
}

// deployable refuses what `make plan` tolerates but a real deployment cannot use.
func deployable(c *spec.Cluster, stack string) error {
	if unfrozen := c.Unfrozen(); len(unfrozen) > 0 {
		return &spec.FieldError{Field: unfrozen[0],
			Problem: fmt.Sprintf("is derived from targetNodes, as are %v: a running cluster's sizes and addresses would move when a pool grows", unfrozen[1:]),
			Fix:     fmt.Sprintf("run `make freeze STACK=%s`, review and commit stacks/Pulumi.%s.yaml", stack, stack)}
	}
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
