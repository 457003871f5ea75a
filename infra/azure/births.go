package azure

import (
	"github.com/pulumi/pulumi-azure-native-sdk/authorization/v2"
	"github.com/pulumi/pulumi-azure-native-sdk/resources/v2"
	"github.com/pulumi/pulumi-azure-native-sdk/storage/v2"
	"github.com/pulumi/pulumi/sdk/v3/go/pulumi"

	"github.com/clusterforge/clusterforge/components/spec"
)

// BirthRetentionDays is how long Azure refuses to delete or overwrite a birth: its maximum, so a
// birth outlives any cluster. The policy stays unlocked: an owner can still lift it on purpose.
const BirthRetentionDays = 146000

// BirthRegistryArgs configures NewBirthRegistry.
type BirthRegistryArgs struct {
	Cluster *spec.Cluster
	// ResourceGroupName is the cluster's group, where the private endpoint lives; the registry
	// itself lives in spec.Cluster.BirthRegistryResourceGroup.
	ResourceGroupName pulumi.StringInput
	EtcdSubnetID      pulumi.StringInput
	// PrivateZoneID is the etcd subnet's private blob zone (BackupStore.PrivateZoneID).
	PrivateZoneID pulumi.IDOutput
}

// BirthRegistry is the evidence that the cluster's etcd ever existed (etcdbackup.Registry), kept
// where deleting the cluster's resource group, its backup account or its stack cannot remove it:
// its own resource group under a CanNotDelete lock, retained by `pulumi destroy`, with births in
// a container Azure keeps immutable.
type BirthRegistry struct {
	pulumi.ResourceState

	// BirthsID and RetirementsID are the scopes of the etcd identity's grants.
	BirthsID, RetirementsID pulumi.IDOutput
}

// NewBirthRegistry builds the registry's group, lock, account and containers, and its endpoint in
// the etcd subnet.
func NewBirthRegistry(ctx *pulumi.Context, name string, args *BirthRegistryArgs, opts ...pulumi.ResourceOption) (*BirthRegistry, error) {
	comp := &BirthRegistry{}
	if err := ctx.RegisterComponentResource("clusterforge:azure:BirthRegistry", name, comp, opts...); err != nil {
		return nil, err
	}
	c, parent := args.Cluster, pulumi.Parent(comp)
	kept := []pulumi.ResourceOption{parent, pulumi.Protect(true), pulumi.RetainOnDelete(true)}
	rg, err := resources.NewResourceGroup(ctx, name+"-rg", &resources.ResourceGroupArgs{
		ResourceGroupName: pulumi.String(c.BirthRegistryResourceGroup()), Location: pulumi.String(c.Location), Tags: tags(c, spec.RoleEtcdMain),
	}, kept...)
	if err != nil {
		return nil, err
	}
	if _, err := authorization.NewManagementLockAtResourceGroupLevel(ctx, name+"-lock", &authorization.ManagementLockAtResourceGroupLevelArgs{
		ResourceGroupName: rg.Name, LockName: pulumi.String("clusterforge-births"), Level: pulumi.String("CanNotDelete"),
		Notes: pulumi.String("Proves that etcd of " + c.Name + " existed, so that an empty member waits for a restore: retire it with forge retire, never delete it"),
	}, kept...); err != nil {
		return nil, err
	}
	account, err := storage.NewStorageAccount(ctx, name+"-account", privateAccountArgs(c, c.BirthRegistryAccount(), rg.Name), kept...)
	if err != nil {
		return nil, err
	}
	service, err := storage.NewBlobServiceProperties(ctx, name+"-blob-service", versionedBlobServiceArgs(account.Name, rg.Name), kept...)
	if err != nil {
		return nil, err
	}
	after := append(kept, pulumi.DependsOn([]pulumi.Resource{service}))
	births, err := storage.NewBlobContainer(ctx, name+"-births", &storage.BlobContainerArgs{
		AccountName: account.Name, ResourceGroupName: rg.Name, ContainerName: pulumi.String(spec.BirthsContainer),
		PublicAccess: storage.PublicAccessNone, ImmutableStorageWithVersioning: &storage.ImmutableStorageWithVersioningArgs{Enabled: pulumi.Bool(true)},
	}, after...)
	if err != nil {
		return nil, err
	}
	if _, err := storage.NewBlobContainerImmutabilityPolicy(ctx, name+"-births-policy", &storage.BlobContainerImmutabilityPolicyArgs{
		AccountName: account.Name, ResourceGroupName: rg.Name, ContainerName: pulumi.String(spec.BirthsContainer), ImmutabilityPolicyName: pulumi.String("default"),
		ImmutabilityPeriodSinceCreationInDays: pulumi.Int(BirthRetentionDays),
	}, append(kept, pulumi.DependsOn([]pulumi.Resource{births}))...); err != nil {
		return nil, err
	}
	retirements, err := storage.NewBlobContainer(ctx, name+"-retirements", &storage.BlobContainerArgs{
		AccountName: account.Name, ResourceGroupName: rg.Name, ContainerName: pulumi.String(spec.RetirementsContainer),
		PublicAccess: storage.PublicAccessNone,
	}, after...)
	if err != nil {
		return nil, err
	}
	// The endpoint is the cluster's: it goes with the cluster's group, the registry stays.
	if err := privateBlobEndpoint(ctx, name+"-endpoint", c, c.BirthRegistryAccount(), account.ID(), args.ResourceGroupName, args.EtcdSubnetID, args.PrivateZoneID, parent); err != nil {
		return nil, err
	}
	comp.BirthsID, comp.RetirementsID = births.ID(), retirements.ID()
	if err := ctx.RegisterResourceOutputs(comp, pulumi.Map{"birthsId": births.ID(), "retirementsId": retirements.ID()}); err != nil {
		return nil, err
	}
	return comp, nil
}
