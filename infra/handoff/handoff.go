// Package handoff is what the infrastructure stack (project clusterforge, infra/program) hands the
// cluster services stack (project clusterforge-services, infra/services): one secret output,
// read through a StackReference, so the two layers share no state but that output.
package handoff

import (
	"encoding/json"
	"fmt"

	"github.com/pulumi/pulumi/sdk/v3/go/pulumi"

	"github.com/clusterforge/clusterforge/components/addons"
)

// InfrastructureProject is the infrastructure's Pulumi project (Pulumi.yaml), which URNs and
// stack references spell.
const InfrastructureProject = "clusterforge"

// SelfManagedOrganization is the one organization of a self-managed backend (a file or a blob
// container), where stack references name it.
const SelfManagedOrganization = "organization"

// Output is the infrastructure stack's output the services stack reads (secret).
const Output = "clusterServices"

// Infrastructure is that output's value.
type Infrastructure struct {
	// Kubeconfig is the admin kubeconfig the services' Kubernetes provider applies with.
	Kubeconfig string `json:"kubeconfig"`
	addons.Deployed
	// AddonPatches are strategic-merge patches over the add-ons by object key (addons.Patch):
	// an environment's own adjustments. The Azure infrastructure has none.
	AddonPatches map[string]string `json:"addonPatches,omitempty"`
}

// Export exports the infrastructure's value (an Output of Infrastructure) as the secret output.
func Export(ctx *pulumi.Context, infrastructure pulumi.Output) {
	ctx.Export(Output, pulumi.ToSecret(infrastructure.ApplyT(func(v any) (map[string]any, error) {
		return v.(Infrastructure).value()
	})))
}

// ExportValue exports a known Infrastructure as the secret output. (pulumi.Any would copy it field
// by field, losing what only unexported fields hold, such as a time.Time's.)
func ExportValue(ctx *pulumi.Context, h Infrastructure) error {
	m, err := h.value()
	if err != nil {
		return err
	}
	ctx.Export(Output, pulumi.ToSecret(pulumi.ToMap(m)))
	return nil
}

// value is h as the output holds it: its JSON as plain maps.
func (h Infrastructure) value() (map[string]any, error) {
	data, err := json.Marshal(h)
	if err != nil {
		return nil, err
	}
	var m map[string]any
	return m, json.Unmarshal(data, &m)
}

// DefaultReference is the stack the services stack of stack reads: the infrastructure stack of
// the same name, in the same organization.
func DefaultReference(ctx *pulumi.Context) string {
	org := ctx.Organization()
	if org == "" {
		org = SelfManagedOrganization
	}
	return fmt.Sprintf("%s/%s/%s", org, InfrastructureProject, ctx.Stack())
}

// Read reads the output of the infrastructure stack named reference. It must have been applied.
func Read(ctx *pulumi.Context, reference string) (Infrastructure, error) {
	ref, err := pulumi.NewStackReference(ctx, "infrastructure", &pulumi.StackReferenceArgs{Name: pulumi.String(reference)})
	if err != nil {
		return Infrastructure{}, err
	}
	details, err := ref.GetOutputDetails(Output)
	if err != nil {
		return Infrastructure{}, err
	}
	value := details.SecretValue
	if value == nil {
		value = details.Value
	}
	if value == nil {
		return Infrastructure{}, fmt.Errorf("stack %s has no output %s: run `pulumi up` on the infrastructure (project %s) first", reference, Output, InfrastructureProject)
	}
	data, err := json.Marshal(value)
	if err != nil {
		return Infrastructure{}, err
	}
	var inf Infrastructure
	if err := json.Unmarshal(data, &inf); err != nil {
		return Infrastructure{}, fmt.Errorf("stack %s output %s: %w", reference, Output, err)
	}
	if inf.Kubeconfig == "" {
		return Infrastructure{}, fmt.Errorf("stack %s output %s has no kubeconfig", reference, Output)
	}
	return inf, nil
}
