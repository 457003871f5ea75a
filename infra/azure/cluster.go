package azure

import (
	"cmp"
	"encoding/json"
	"strings"
	"time"

	"github.com/clusterforge/clusterforge/components/azurerbac"

	"github.com/pulumi/pulumi-azure-native-sdk/resources/v2"
	"github.com/pulumi/pulumi-tls/sdk/v5/go/tls"
	"github.com/pulumi/pulumi/sdk/v3/go/pulumi"

	"github.com/clusterforge/clusterforge/components/addons"
	"github.com/clusterforge/clusterforge/components/machine"
	"github.com/clusterforge/clusterforge/components/pki"
	"github.com/clusterforge/clusterforge/components/spec"
)

// ClusterArgs configures NewCluster.
type ClusterArgs struct {
	Cluster *spec.Cluster
	// Now is the time of the run, for credentials that rotate on a calendar (the join token).
	Now time.Time
	// Replacing names the one etcd member whose VM this run may replace (`make roll`); every
	// other etcd VM and NIC is protected. Empty outside a roll.
	Replacing string
	// Applied is the spec the cluster last ran; the worker pools named in Held keep their
	// scale-set models rendered from it (a roll moves them after its canary).
	Applied *spec.Cluster
	Held    map[string]bool
}

// EtcdClientAccess is the etcdClient stack output: PEMs of the etcd CA and a client pair.
type EtcdClientAccess struct {
	CA   string `json:"ca"`
	Cert string `json:"cert"`
	Key  string `json:"key"`
}

// PoolCapacity is a pool's entry in the stack outputs.
type PoolCapacity struct {
	ScaleSets pulumi.StringArrayOutput
	MaxNodes  pulumi.IntOutput
}

// Cluster is a whole clusterforge cluster: resource group, network, PKI, identities, both etcd
// clusters, the apiserver group and every worker pool.
type Cluster struct {
	pulumi.ResourceState

	APIEndpoint pulumi.StringOutput
	// Kubeconfig is the admin kubeconfig (secret).
	Kubeconfig pulumi.StringOutput
	// AdminSSHPrivateKey is set when the stack gave no admin.sshPublicKey (secret).
	AdminSSHPrivateKey pulumi.StringOutput
	Pools              map[string]PoolCapacity
	// SubscriptionID is the subscription the cluster's resource group lives in.
	SubscriptionID pulumi.StringOutput
	// ClientIDs are the workloads' identities (addons.AzureWorkloads), TenantID their tenant.
	ClientIDs map[string]pulumi.StringOutput
	TenantID  pulumi.StringOutput
	// EtcdClient is the etcd client pair and CA as JSON (EtcdClientAccess, secret): `make roll`
	// moves leadership and replaces members with it from the hub.
	EtcdClient pulumi.StringOutput
	// JoinSeed derives the pools' join tokens (pki.JoinToken; secret), valid until
	// BootstrapTokenExpires.
	JoinSeed              pulumi.StringOutput
	BootstrapTokenExpires time.Time
	// PKI is the cluster's pki.Bundle (secret): the add-ons take the ops webhooks' pair from it.
	PKI pulumi.AnyOutput
}

// NewCluster builds the cluster.
func NewCluster(ctx *pulumi.Context, name string, args *ClusterArgs, opts ...pulumi.ResourceOption) (*Cluster, error) {
	// The stack's own limits are Validate's; these are the design's, refused before anything is made.
	for _, u := range LimitUses(args.Cluster) {
		if u.Over() && u.Limit.Kind == spec.Hard {
			return nil, u.Refusal()
		}
	}
	comp := &Cluster{Pools: map[string]PoolCapacity{}, ClientIDs: map[string]pulumi.StringOutput{}}
	if err := ctx.RegisterComponentResource(ClusterType, name, comp, opts...); err != nil {
		return nil, err
	}
	c, parent := args.Cluster, pulumi.Parent(comp)

	rg, err := resources.NewResourceGroup(ctx, name+"-rg", &resources.ResourceGroupArgs{
		ResourceGroupName: pulumi.String(c.ResourceGroup()), Location: pulumi.String(c.Location), Tags: tags(c, ""),
	}, parent)
	if err != nil {
		return nil, err
	}
	login := Login{AdminUsername: c.Admin.Username, SSHPublicKey: pulumi.String(c.Admin.AuthorizedKey())} // the parsed key only, never the line as given
	comp.AdminSSHPrivateKey = pulumi.String("").ToStringOutput()
	if c.Admin.SSHPublicKey == "" {
		key, err := tls.NewPrivateKey(ctx, name+"-admin-ssh", &tls.PrivateKeyArgs{Algorithm: pulumi.String("RSA"), RsaBits: pulumi.Int(4096)}, parent)
		if err != nil {
			return nil, err
		}
		login.SSHPublicKey, comp.AdminSSHPrivateKey = key.PublicKeyOpenssh, pulumi.ToSecret(key.PrivateKeyOpenssh).(pulumi.StringOutput)
	}

	certs, err := NewClusterPKI(ctx, name+"-pki", &ClusterPKIArgs{Cluster: c, Now: args.Now}, parent)
	if err != nil {
		return nil, err
	}
	net, err := NewNetwork(ctx, name+"-network", &NetworkArgs{Cluster: c, ResourceGroupName: rg.Name}, parent)
	if err != nil {
		return nil, err
	}
	identities := map[string]*RoleIdentity{}
	identity := func(role string) (*RoleIdentity, error) {
		id, err := NewRoleIdentity(ctx, name+"-"+role, &RoleIdentityArgs{Cluster: c, Role: role, ResourceGroupName: rg.Name}, parent)
		identities[role] = id
		return id, err
	}
	scopes := map[string][]pulumi.StringInput{azurerbac.ScopeResourceGroup: {rg.ID()}}

	backups, err := NewBackupStore(ctx, name+"-backups", &BackupStoreArgs{
		Cluster: c, ResourceGroupName: rg.Name, VNetID: net.VNetID, EtcdSubnetID: net.SubnetIDs[SubnetEtcd],
	}, parent)
	if err != nil {
		return nil, err
	}
	scopes[azurerbac.ScopeBackupContainer] = []pulumi.StringInput{backups.ContainerID}
	births, err := NewBirthRegistry(ctx, name+"-births", &BirthRegistryArgs{
		Cluster: c, ResourceGroupName: rg.Name, EtcdSubnetID: net.SubnetIDs[SubnetEtcd], PrivateZoneID: backups.PrivateZoneID,
	}, parent)
	if err != nil {
		return nil, err
	}
	scopes[azurerbac.ScopeBirths] = []pulumi.StringInput{births.BirthsID}
	scopes[azurerbac.ScopeRetirements] = []pulumi.StringInput{births.RetirementsID}

	for _, e := range c.EtcdClusters() {
		id, err := identity(e.Role)
		if err != nil {
			return nil, err
		}
		if _, err := NewEtcdCluster(ctx, name+"-"+e.Role, &EtcdClusterArgs{
			Cluster: c, Etcd: e, ResourceGroupName: rg.Name, SubnetID: net.SubnetIDs[SubnetEtcd],
			IdentityID: id.ID, CustomData: CustomData(c, certs.Bundle, e.Role), Login: login, Replacing: args.Replacing,
		}, parent); err != nil {
			return nil, err
		}
	}

	apiID, err := identity(spec.RoleAPIServer)
	if err != nil {
		return nil, err
	}
	api, err := NewAPIServerGroup(ctx, name+"-apiserver", &APIServerGroupArgs{
		Cluster: c, ResourceGroupName: rg.Name, ResourceGroupID: rg.ID(), SubnetID: net.SubnetIDs[SubnetControlPlane],
		IdentityID: apiID.ID, CustomData: CustomData(c, certs.Bundle, spec.RoleAPIServer), Login: login,
	}, parent)
	if err != nil {
		return nil, err
	}
	scopes[azurerbac.ScopeAPIServerScaleSet] = []pulumi.StringInput{api.ScaleSetID}

	for _, p := range c.Pools {
		role := spec.WorkerRole(p.Name)
		id, err := identity(role)
		if err != nil {
			return nil, err
		}
		var held *spec.Cluster
		if args.Held[p.Name] && args.Applied != nil {
			if _, ok := args.Applied.PoolOfRole(role); ok {
				held = args.Applied
			}
		}
		pool, err := NewWorkerPool(ctx, name+"-"+role, &WorkerPoolArgs{
			Cluster: c, Pool: p, Model: held, ResourceGroupName: rg.Name, Network: net,
			IdentityID: id.ID, CustomData: CustomData(cmp.Or(held, c), certs.Bundle, role), Login: login,
		}, parent)
		if err != nil {
			return nil, err
		}
		comp.Pools[p.Name] = PoolCapacity{ScaleSets: pool.ScaleSets, MaxNodes: pool.MaxNodes}
		scopes[azurerbac.ScopeWorkerScaleSets] = append(scopes[azurerbac.ScopeWorkerScaleSets], pool.ScaleSetIDs...)
	}
	issuer, err := NewIssuer(ctx, name+"-issuer", &IssuerArgs{Cluster: c, ResourceGroupName: rg.Name, PKI: certs.Bundle}, parent)
	if err != nil {
		return nil, err
	}
	for _, w := range addons.AzureWorkloads {
		// The federation goes before the issuer it trusts, never after: an issuer name freed
		// while still trusted could be registered by anyone.
		id, err := NewWorkloadIdentity(ctx, name+"-"+w, &RoleIdentityArgs{Cluster: c, Role: w, ResourceGroupName: rg.Name}, parent, pulumi.DependsOn([]pulumi.Resource{issuer}))
		if err != nil {
			return nil, err
		}
		identities[w], comp.ClientIDs[w], comp.TenantID = id, id.ClientID, id.TenantID
	}
	for _, role := range append(c.Roles(), addons.AzureWorkloads...) {
		if len(azurerbac.Grants(role)) == 0 {
			continue
		}
		if _, err := NewGrants(ctx, name+"-"+role+"-grants", &GrantsArgs{
			Cluster: c, Role: role, PrincipalID: identities[role].PrincipalID, ResourceGroupID: rg.ID(), Scopes: scopes,
		}, parent); err != nil {
			return nil, err
		}
	}
	comp.SubscriptionID = rg.ID().ToStringOutput().ApplyT(func(id string) string {
		return strings.Split(id, "/")[2] // "/subscriptions/<id>/resourceGroups/<name>"
	}).(pulumi.StringOutput)

	comp.JoinSeed = pulumi.ToSecret(certs.Bundle.ApplyT(func(v any) string { return v.(pki.Bundle).JoinSeed })).(pulumi.StringOutput)
	_, comp.BootstrapTokenExpires = pki.BootstrapTokenWindow(args.Now)
	comp.PKI = certs.Bundle
	comp.APIEndpoint = api.Endpoint
	comp.EtcdClient = pulumi.ToSecret(certs.Bundle.ApplyT(func(v any) (string, error) {
		b := v.(pki.Bundle)
		data, err := json.Marshal(EtcdClientAccess{CA: b.Trust(pki.EtcdServerCAs(c)...), Cert: b.Pair(pki.OperatorEtcdClient).CertPEM, Key: b.Pair(pki.OperatorEtcdClient).KeyPEM})
		return string(data), err
	})).(pulumi.StringOutput)
	comp.Kubeconfig = pulumi.ToSecret(certs.Bundle.ApplyT(func(v any) string {
		b := v.(pki.Bundle)
		return machine.EmbeddedKubeconfig(c.Name, c.APIServerURL(), b.Pair(pki.ClusterCA).CertPEM, b.Pair(pki.Admin).CertPEM, b.Pair(pki.Admin).KeyPEM)
	})).(pulumi.StringOutput)
	if err := ctx.RegisterResourceOutputs(comp, pulumi.Map{
		"apiEndpoint": comp.APIEndpoint, "kubeconfig": comp.Kubeconfig, "adminSshPrivateKey": comp.AdminSSHPrivateKey,
		"subscriptionId": comp.SubscriptionID, "tenantId": comp.TenantID, "etcdClient": comp.EtcdClient,
	}); err != nil {
		return nil, err
	}
	return comp, nil
}
