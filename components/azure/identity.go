package azure

import (
	"strings"

	"github.com/pulumi/pulumi-azure-native-sdk/authorization/v2"
	"github.com/pulumi/pulumi-azure-native-sdk/managedidentity/v2"
	"github.com/pulumi/pulumi/sdk/v3/go/pulumi"

	"github.com/clusterforge/clusterforge/components/spec"
)

// Azure built-in role definition ids.
const (
	RoleReader                    = "acdd72a7-3385-48ef-bd42-f606fba81ae7"
	RoleVirtualMachineContributor = "9980e02c-c2be-4d73-94e8-173b1dc7cf3c"
	RoleNetworkContributor        = "4d97b98b-1d4f-4787-a291-c67834d212e7"
)

// Scopes a grant can name.
const (
	ScopeResourceGroup = "resourceGroup"
	ScopeVNet          = "vnet"
)

// Grant is one role assignment of a machine role's identity.
type Grant struct {
	Role  string
	Scope string
}

// Grants is the least privilege of each machine role. The apiservers host the cloud integration
// (the cloud provider manages NICs and load balancer members), so they may manage VMs in the
// cluster's resource group and its VNet. Workers only read their own instances, except the system
// pool's, where cluster-autoscaler runs and resizes the scale sets (L19). etcd needs nothing from Azure.
func Grants(c *spec.Cluster, role string) []Grant {
	switch {
	case role == spec.RoleAPIServer:
		return []Grant{{RoleVirtualMachineContributor, ScopeResourceGroup}, {RoleNetworkContributor, ScopeVNet}}
	case role == spec.WorkerRole(c.SystemPool().Name):
		return []Grant{{RoleReader, ScopeResourceGroup}, {RoleVirtualMachineContributor, ScopeResourceGroup}}
	case strings.HasPrefix(role, "worker-"):
		return []Grant{{RoleReader, ScopeResourceGroup}}
	}
	return nil
}

// RoleIdentityArgs configures NewRoleIdentity.
type RoleIdentityArgs struct {
	Cluster           *spec.Cluster
	Role              string
	ResourceGroupName pulumi.StringInput
	// Scopes maps ScopeResourceGroup and ScopeVNet to resource ids.
	Scopes map[string]pulumi.StringInput
}

// RoleIdentity is a user-assigned managed identity of one machine role and its role assignments.
type RoleIdentity struct {
	pulumi.ResourceState

	ID          pulumi.IDOutput
	PrincipalID pulumi.StringOutput
	// ClientID is what software on the machines names the identity by (cluster-autoscaler's cloud config).
	ClientID pulumi.StringOutput
}

// NewRoleIdentity creates the identity and its least-privilege grants.
func NewRoleIdentity(ctx *pulumi.Context, name string, args *RoleIdentityArgs, opts ...pulumi.ResourceOption) (*RoleIdentity, error) {
	comp := &RoleIdentity{}
	if err := ctx.RegisterComponentResource("clusterforge:azure:RoleIdentity", name, comp, opts...); err != nil {
		return nil, err
	}
	c, parent := args.Cluster, pulumi.Parent(comp)
	id, err := managedidentity.NewUserAssignedIdentity(ctx, name+"-identity", &managedidentity.UserAssignedIdentityArgs{
		ResourceGroupName: args.ResourceGroupName, Location: pulumi.String(c.Location), Tags: tags(c, args.Role),
	}, parent)
	if err != nil {
		return nil, err
	}
	for _, g := range Grants(c, args.Role) {
		scope := args.Scopes[g.Scope]
		if _, err := authorization.NewRoleAssignment(ctx, name+"-"+g.Scope+"-"+g.Role[:8], &authorization.RoleAssignmentArgs{
			PrincipalId:      id.PrincipalId,
			PrincipalType:    pulumi.String("ServicePrincipal"),
			Scope:            scope,
			RoleDefinitionId: roleDefinitionID(scope, g.Role),
		}, parent); err != nil {
			return nil, err
		}
	}
	comp.ID, comp.PrincipalID, comp.ClientID = id.ID(), id.PrincipalId, id.ClientId
	if err := ctx.RegisterResourceOutputs(comp, pulumi.Map{"id": id.ID(), "principalId": id.PrincipalId, "clientId": id.ClientId}); err != nil {
		return nil, err
	}
	return comp, nil
}

// roleDefinitionID builds the subscription-level role definition id from any resource id in it.
func roleDefinitionID(scope pulumi.StringInput, role string) pulumi.StringOutput {
	return scope.ToStringOutput().ApplyT(func(s string) string {
		sub := strings.Join(strings.Split(s, "/")[:3], "/") // "/subscriptions/<id>"
		return sub + "/providers/Microsoft.Authorization/roleDefinitions/" + role
	}).(pulumi.StringOutput)
}
