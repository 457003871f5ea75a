package azure

import (
	"crypto/sha1"
	"fmt"
	"strings"

	"github.com/clusterforge/clusterforge/components/azurerbac"

	"github.com/pulumi/pulumi-azure-native-sdk/authorization/v2"
	"github.com/pulumi/pulumi-azure-native-sdk/managedidentity/v2"
	"github.com/pulumi/pulumi/sdk/v3/go/pulumi"

	"github.com/clusterforge/clusterforge/components/spec"
)

// RoleIdentityArgs configures NewRoleIdentity.
type RoleIdentityArgs struct {
	Cluster           *spec.Cluster
	Role              string
	ResourceGroupName pulumi.StringInput
}

// RoleIdentity is a user-assigned managed identity of one machine role.
type RoleIdentity struct {
	pulumi.ResourceState

	ID          pulumi.IDOutput
	PrincipalID pulumi.StringOutput
	// ClientID is what software names the identity by (a workload's AZURE_CLIENT_ID).
	ClientID pulumi.StringOutput
	// Name is the identity's resource name; TenantID its Entra ID tenant.
	Name     pulumi.StringOutput
	TenantID pulumi.StringOutput
}

// NewRoleIdentity creates the identity; NewGrants gives it its roles once their scopes exist.
func NewRoleIdentity(ctx *pulumi.Context, name string, args *RoleIdentityArgs, opts ...pulumi.ResourceOption) (*RoleIdentity, error) {
	comp := &RoleIdentity{}
	if err := ctx.RegisterComponentResource("clusterforge:azure:RoleIdentity", name, comp, opts...); err != nil {
		return nil, err
	}
	c := args.Cluster
	id, err := managedidentity.NewUserAssignedIdentity(ctx, name+"-identity", &managedidentity.UserAssignedIdentityArgs{
		ResourceGroupName: args.ResourceGroupName, Location: pulumi.String(c.Location), Tags: tags(c, args.Role),
	}, pulumi.Parent(comp))
	if err != nil {
		return nil, err
	}
	comp.ID, comp.PrincipalID, comp.ClientID, comp.Name, comp.TenantID = id.ID(), id.PrincipalId, id.ClientId, id.Name, id.TenantId
	if err := ctx.RegisterResourceOutputs(comp, pulumi.Map{"id": id.ID(), "principalId": id.PrincipalId, "clientId": id.ClientId}); err != nil {
		return nil, err
	}
	return comp, nil
}

// GrantsArgs configures NewGrants.
type GrantsArgs struct {
	Cluster     *spec.Cluster
	Role        string
	PrincipalID pulumi.StringInput
	// ResourceGroupID is where custom roles are defined and assignable.
	ResourceGroupID pulumi.StringInput
	// Scopes maps each scope name to the resource ids it stands for.
	Scopes map[string][]pulumi.StringInput
}

// RoleGrants are a role identity's role assignments and the custom roles they use.
type RoleGrants struct {
	pulumi.ResourceState
}

// NewGrants assigns azurerbac.Grants(role) to the principal; a role without grants gets none.
func NewGrants(ctx *pulumi.Context, name string, args *GrantsArgs, opts ...pulumi.ResourceOption) (*RoleGrants, error) {
	comp := &RoleGrants{}
	if err := ctx.RegisterComponentResource("clusterforge:azure:Grants", name, comp, opts...); err != nil {
		return nil, err
	}
	parent := pulumi.Parent(comp)
	definitions := map[string]pulumi.StringOutput{}
	for _, g := range azurerbac.Grants(args.Role) {
		definition, custom := definitions[g.Role]
		if azurerbac.IsCustom(g.Role) && !custom {
			// Named for its holder too: each holder's definitions are its own resources.
			roleName := fmt.Sprintf("clusterforge %s %s %s", args.Cluster.Name, args.Role, g.Role)
			d, err := authorization.NewRoleDefinition(ctx, name+"-"+g.Role, &authorization.RoleDefinitionArgs{
				RoleName: pulumi.String(roleName), Description: pulumi.String(g.Consumer),
				RoleDefinitionId: args.ResourceGroupID.ToStringOutput().ApplyT(func(rg string) string { return nameGUID(rg + "/" + roleName) }).(pulumi.StringOutput),
				Scope:            args.ResourceGroupID,
				AssignableScopes: pulumi.StringArray{args.ResourceGroupID},
				Permissions: authorization.PermissionArray{authorization.PermissionArgs{
					Actions: pulumi.ToStringArray(azurerbac.CustomRoleActions[g.Role]), DataActions: pulumi.ToStringArray(azurerbac.CustomRoleDataActions[g.Role]),
				}},
			}, parent)
			if err != nil {
				return nil, err
			}
			definition, definitions[g.Role] = d.ID().ToStringOutput(), d.ID().ToStringOutput()
		}
		for i, scope := range args.Scopes[g.Scope] {
			roleID := definition
			if !azurerbac.IsCustom(g.Role) {
				roleID = builtInRole(scope, g.Role)
			}
			if _, err := authorization.NewRoleAssignment(ctx, fmt.Sprintf("%s-%s-%s-%d", name, g.Scope, g.Role, i), &authorization.RoleAssignmentArgs{
				PrincipalId: args.PrincipalID, PrincipalType: pulumi.String("ServicePrincipal"),
				Scope: scope, RoleDefinitionId: roleID, Description: pulumi.String(g.Consumer),
			}, parent); err != nil {
				return nil, err
			}
		}
	}
	if err := ctx.RegisterResourceOutputs(comp, pulumi.Map{}); err != nil {
		return nil, err
	}
	return comp, nil
}

// builtInRole is a built-in role definition's id in the subscription of scope (any resource id).
func builtInRole(scope pulumi.StringInput, role string) pulumi.StringOutput {
	return scope.ToStringOutput().ApplyT(func(s string) string {
		sub := strings.Join(strings.Split(s, "/")[:3], "/") // "/subscriptions/<id>"
		return sub + "/providers/Microsoft.Authorization/roleDefinitions/" + role
	}).(pulumi.StringOutput)
}

// nameGUID is a name-based (version 5 style) GUID, so a custom role keeps its id across runs.
func nameGUID(name string) string {
	h := sha1.Sum([]byte("clusterforge/" + name))
	h[6] = h[6]&0x0f | 0x50
	h[8] = h[8]&0x3f | 0x80
	return fmt.Sprintf("%x-%x-%x-%x-%x", h[0:4], h[4:6], h[6:8], h[8:10], h[10:16])
}
