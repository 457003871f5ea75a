package azure

import (
	"github.com/pulumi/pulumi-azure-native-sdk/network/v2"
	"github.com/pulumi/pulumi-azure-native-sdk/storage/v2"
	"github.com/pulumi/pulumi/sdk/v3/go/pulumi"

	"github.com/clusterforge/clusterforge/components/spec"
)

// BackupRetentionDays is how long Azure keeps a deleted or overwritten snapshot (soft delete and
// versions): an agent pruning by mistake, or an attacker with the etcd identity, cannot destroy
// the history inside this window.
const BackupRetentionDays = 30

// privateBlobZone is the private DNS zone Azure resolves a storage account's blob endpoint in
// when it has a private endpoint.
const privateBlobZone = "privatelink.blob.core.windows.net"

// BackupStoreArgs configures NewBackupStore.
type BackupStoreArgs struct {
	Cluster           *spec.Cluster
	ResourceGroupName pulumi.StringInput
	VNetID            pulumi.StringInput
	// EtcdSubnetID is where the private endpoint lives, next to the members that write.
	EtcdSubnetID pulumi.StringInput
}

// BackupStore is the storage account and container of the main etcd's snapshots: reachable only
// through a private endpoint in the etcd subnet, Entra ID only (no account keys), with versioning
// and soft delete. It outlives the cluster's machines and is protected from `pulumi destroy`.
type BackupStore struct {
	pulumi.ResourceState

	AccountName pulumi.StringOutput
	// ContainerID is the scope of the etcd identity's one data-plane grant.
	ContainerID pulumi.IDOutput
}

// BackupAccountArgs is the storage account: zone-redundant, no public network access, no shared
// keys, TLS 1.2.
func BackupAccountArgs(a *BackupStoreArgs) *storage.StorageAccountArgs {
	c := a.Cluster
	return &storage.StorageAccountArgs{
		AccountName: pulumi.String(c.BackupStorageAccount()), ResourceGroupName: a.ResourceGroupName,
		Location: pulumi.String(c.Location), Tags: tags(c, spec.RoleEtcdMain),
		Kind: pulumi.String("StorageV2"), Sku: &storage.SkuArgs{Name: pulumi.String("Standard_ZRS")},
		PublicNetworkAccess:    pulumi.String("Disabled"),
		AllowBlobPublicAccess:  pulumi.Bool(false),
		AllowSharedKeyAccess:   pulumi.Bool(false),
		EnableHttpsTrafficOnly: pulumi.Bool(true),
		MinimumTlsVersion:      pulumi.String("TLS1_2"),
		NetworkRuleSet:         &storage.NetworkRuleSetArgs{DefaultAction: storage.DefaultActionDeny, Bypass: pulumi.String("None")},
	}
}

// BackupBlobServiceArgs keeps every overwritten or deleted snapshot for BackupRetentionDays.
func BackupBlobServiceArgs(a *BackupStoreArgs, account pulumi.StringInput) *storage.BlobServicePropertiesArgs {
	retention := &storage.DeleteRetentionPolicyArgs{Enabled: pulumi.Bool(true), Days: pulumi.Int(BackupRetentionDays)}
	return &storage.BlobServicePropertiesArgs{
		AccountName: account, ResourceGroupName: a.ResourceGroupName, BlobServicesName: pulumi.String("default"),
		IsVersioningEnabled: pulumi.Bool(true), DeleteRetentionPolicy: retention, ContainerDeleteRetentionPolicy: retention,
	}
}

// NewBackupStore builds the account, its blob settings, the container and the private endpoint
// with the DNS that makes spec.Cluster.BackupStoreURL resolve to it.
func NewBackupStore(ctx *pulumi.Context, name string, args *BackupStoreArgs, opts ...pulumi.ResourceOption) (*BackupStore, error) {
	comp := &BackupStore{}
	if err := ctx.RegisterComponentResource("clusterforge:azure:BackupStore", name, comp, opts...); err != nil {
		return nil, err
	}
	c, parent := args.Cluster, pulumi.Parent(comp)
	account, err := storage.NewStorageAccount(ctx, name+"-account", BackupAccountArgs(args), parent, pulumi.Protect(true))
	if err != nil {
		return nil, err
	}
	service, err := storage.NewBlobServiceProperties(ctx, name+"-blob-service", BackupBlobServiceArgs(args, account.Name), parent)
	if err != nil {
		return nil, err
	}
	container, err := storage.NewBlobContainer(ctx, name+"-container", &storage.BlobContainerArgs{
		AccountName: account.Name, ResourceGroupName: args.ResourceGroupName,
		ContainerName: pulumi.String(spec.BackupContainer), PublicAccess: storage.PublicAccessNone,
	}, parent, pulumi.Protect(true), pulumi.DependsOn([]pulumi.Resource{service}))
	if err != nil {
		return nil, err
	}
	zone, err := network.NewPrivateZone(ctx, name+"-dns", &network.PrivateZoneArgs{
		PrivateZoneName: pulumi.String(privateBlobZone), ResourceGroupName: args.ResourceGroupName,
		Location: pulumi.String("global"), Tags: tags(c, ""),
	}, parent)
	if err != nil {
		return nil, err
	}
	if _, err := network.NewVirtualNetworkLink(ctx, name+"-dns-link", &network.VirtualNetworkLinkArgs{
		PrivateZoneName: zone.Name, ResourceGroupName: args.ResourceGroupName, Location: pulumi.String("global"),
		VirtualNetwork: &network.SubResourceArgs{Id: args.VNetID}, RegistrationEnabled: pulumi.Bool(false),
	}, parent); err != nil {
		return nil, err
	}
	endpoint, err := network.NewPrivateEndpoint(ctx, name+"-endpoint", &network.PrivateEndpointArgs{
		PrivateEndpointName: pulumi.String(c.BackupStorageAccount() + "-blob"), ResourceGroupName: args.ResourceGroupName,
		Location: pulumi.String(c.Location), Tags: tags(c, spec.RoleEtcdMain), Subnet: &network.SubnetTypeArgs{Id: args.EtcdSubnetID},
		PrivateLinkServiceConnections: network.PrivateLinkServiceConnectionArray{network.PrivateLinkServiceConnectionArgs{
			Name: pulumi.String("blob"), PrivateLinkServiceId: account.ID(), GroupIds: pulumi.StringArray{pulumi.String("blob")},
		}},
	}, parent)
	if err != nil {
		return nil, err
	}
	if _, err := network.NewPrivateDnsZoneGroup(ctx, name+"-endpoint-dns", &network.PrivateDnsZoneGroupArgs{
		PrivateEndpointName: endpoint.Name, ResourceGroupName: args.ResourceGroupName, PrivateDnsZoneGroupName: pulumi.String("default"),
		PrivateDnsZoneConfigs: network.PrivateDnsZoneConfigArray{network.PrivateDnsZoneConfigArgs{
			Name: pulumi.String("blob"), PrivateDnsZoneId: zone.ID(),
		}},
	}, parent); err != nil {
		return nil, err
	}
	comp.AccountName, comp.ContainerID = account.Name, container.ID()
	if err := ctx.RegisterResourceOutputs(comp, pulumi.Map{"accountName": account.Name, "containerId": container.ID()}); err != nil {
		return nil, err
	}
	return comp, nil
}
