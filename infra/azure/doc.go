// Package azure holds the Pulumi components that build a clusterforge cluster on Azure with
// pulumi-azure-native: NewNetwork, NewRoleIdentity, NewClusterPKI, NewEtcdCluster,
// NewAPIServerGroup, NewWorkerPool, and NewCluster that composes them. Each follows Pulumi's
// conventions (NewX(ctx, name, args, opts...), children named "<name>-<role>" and parented to the
// component, outputs registered). The mapping from spec to azure-native arguments lives in pure
// functions (*Args) that tests table-test without an engine. What a machine runs comes from
// components/machine; nothing here builds a flag.
package azure

import (
	"encoding/base64"

	"github.com/pulumi/pulumi/sdk/v3/go/pulumi"

	"github.com/clusterforge/clusterforge/components/machine"
	"github.com/clusterforge/clusterforge/components/pki"
	"github.com/clusterforge/clusterforge/components/spec"
	"github.com/clusterforge/clusterforge/components/wellknown"
)

func tags(c *spec.Cluster, role string) pulumi.StringMap {
	t := pulumi.StringMap{wellknown.TagCluster: pulumi.String(c.Name)}
	if role != "" {
		t[wellknown.TagRole] = pulumi.String(role)
	}
	return t
}

// CustomData renders a role's cloud-init from the PKI bundle (an output holding a pki.Bundle),
// base64-encoded for Azure and kept secret: it carries private keys.
func CustomData(c *spec.Cluster, bundle pulumi.AnyOutput, role string) pulumi.StringOutput {
	return pulumi.ToSecret(bundle.ApplyT(func(v any) (string, error) {
		m, err := machine.Render(c, v.(pki.Bundle), role)
		if err != nil {
			return "", err
		}
		ud, err := machine.UserData(m)
		if err != nil {
			return "", err
		}
		return base64.StdEncoding.EncodeToString([]byte(ud)), nil
	})).(pulumi.StringOutput)
}
