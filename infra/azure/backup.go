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
	// ContainerID is the scope of the etcd identity's grant on the snapshots.
	ContainerID pulumi.IDOutput
	// PrivateZoneID is the private DNS zone of the etcd subnet's blob endpoints.
	PrivateZoneID pulumi.IDOutput
}

// privateAccountArgs is a storage account of the etcd members: zone-redundant, no public network
// access, no shared keys, TLS 1.2.
func privateAccountArgs(c *spec.Cluster, account string, resourceGroup pulumi.StringInput) *storage.StorageAccountArgs {
	return &storage.StorageAccountArgs{
		AccountName: pulumi.String(account), ResourceGroupName: resourceGroup,
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

// versionedBlobServiceArgs keeps every overwritten or deleted object for BackupRetentionDays.
func versionedBlobServiceArgs(account, resourceGroup pulumi.StringInput) *storage.BlobServicePropertiesArgs {
	retention := &storage.DeleteRetentionPolicyArgs{Enabled: pulumi.Bool(true), Days: pulumi.Int(BackupRetentionDays)}
	return &storage.BlobServicePropertiesArgs{
		AccountName: account, ResourceGroupName: resourceGroup, BlobServicesName: pulumi.String("default"),
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
	account, err := storage.NewStorageAccount(ctx, name+"-account", privateAccountArgs(c, c.BackupStorageAccount(), args.ResourceGroupName), parent, pulumi.Protect(true))
	if err != nil {
		return nil, err
	}
	service, err := storage.NewBlobServiceProperties(ctx, name+"-blob-service", versionedBlobServiceArgs(account.Name, args.ResourceGroupName), parent)
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
	if err := privateBlobEndpoint(ctx, name+"-endpoint", c, c.BackupStorageAccount(), account.ID(), args.ResourceGroupName, args.EtcdSubnetID, zone.ID(), parent); err != nil {
		return nil, err
	}
	comp.AccountName, comp.ContainerID, comp.PrivateZoneID = account.Name, container.ID(), zone.ID()
	if err := ctx.RegisterResourceOutputs(comp, pulumi.Map{"accountName": account.Name, "containerId": container.ID(), "privateZoneId": zone.ID()}); err != nil {
		return nil, err
	}
	return comp, nil
}

// privateBlobEndpoint is a storage account's blob endpoint in the etcd subnet, with its address in
// the private zone, so that the account's public name resolves to it inside the VNet.
func privateBlobEndpoint(ctx *pulumi.Context, name string, c *spec.Cluster, account string, accountID pulumi.IDOutput,
	resourceGroup, subnetID pulumi.StringInput, zoneID pulumi.IDOutput, opts ...pulumi.ResourceOption) error {
	endpoint, err := network.NewPrivateEndpoint(ctx, name, &network.PrivateEndpointArgs{
		PrivateEndpointName: pulumi.String(account + "-blob"), ResourceGroupName: resourceGroup,
		Location: pulumi.String(c.Location), Tags: tags(c, spec.RoleEtcdMain), Subnet: &network.SubnetTypeArgs{Id: subnetID},
		PrivateLinkServiceConnections: network.PrivateLinkServiceConnectionArray{network.PrivateLinkServiceConnectionArgs{
			Name: pulumi.String("blob"), PrivateLinkServiceId: accountID.ToStringOutput(), GroupIds: pulumi.StringArray{pulumi.String("blob")},
		}},
	}, opts...)
	if err != nil {
		return err
	}
	_, err = network.NewPrivateDnsZoneGroup(ctx, name+"-dns", &network.PrivateDnsZoneGroupArgs{
		PrivateEndpointName: endpoint.Name, ResourceGroupName: resourceGroup, PrivateDnsZoneGroupName: pulumi.String("default"),
		PrivateDnsZoneConfigs: network.PrivateDnsZoneConfigArray{network.PrivateDnsZoneConfigArgs{
			Name: pulumi.String("blob"), PrivateDnsZoneId: zoneID.ToStringOutput(),
		}},
	}, opts...)
	return err
}
