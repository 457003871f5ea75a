package azure

import (
	"github.com/pulumi/pulumi-azure-native-sdk/authorization/v2"
	"github.com/pulumi/pulumi-azure-native-sdk/managedidentity/v2"
	"github.com/pulumi/pulumi-azure-native-sdk/storage/v2"
	"github.com/pulumi/pulumi/sdk/v3/go/pulumi"

	"github.com/clusterforge/clusterforge/components/addons"
	"github.com/clusterforge/clusterforge/components/pki"
	"github.com/clusterforge/clusterforge/components/spec"
)

// IssuerArgs configures NewIssuer.
type IssuerArgs struct {
	Cluster           *spec.Cluster
	ResourceGroupName pulumi.StringInput
	// PKI is the cluster's pki.Bundle: its service-account public key is the issuer's.
	PKI pulumi.AnyOutput
}

// Issuer publishes the service-account issuer's discovery document and keys where Entra ID reads
// them: spec.Cluster.ServiceAccountIssuer, a public container holding nothing else, in an
// account of its own (the backups' account stays private).
type Issuer struct {
	pulumi.ResourceState
}

// IssuerAccountArgs is the storage account: public blob reads, HTTPS and TLS 1.2 only.
func IssuerAccountArgs(a *IssuerArgs) *storage.StorageAccountArgs {
	c := a.Cluster
	return &storage.StorageAccountArgs{
		AccountName: pulumi.String(c.IssuerStorageAccount()), ResourceGroupName: a.ResourceGroupName,
		Location: pulumi.String(c.Location), Tags: tags(c, ""),
		Kind: pulumi.String("StorageV2"), Sku: &storage.SkuArgs{Name: pulumi.String("Standard_ZRS")},
		AllowBlobPublicAccess:  pulumi.Bool(true),
		EnableHttpsTrafficOnly: pulumi.Bool(true),
		MinimumTlsVersion:      pulumi.String("TLS1_2"),
	}
}

// NewIssuer builds the account, the container and the two documents.
func NewIssuer(ctx *pulumi.Context, name string, args *IssuerArgs, opts ...pulumi.ResourceOption) (*Issuer, error) {
	comp := &Issuer{}
	if err := ctx.RegisterComponentResource("clusterforge:azure:Issuer", name, comp, opts...); err != nil {
		return nil, err
	}
	c, parent := args.Cluster, pulumi.Parent(comp)
	// Protected: its name follows from the cluster's, so once deleted anyone could take it and
	// publish keys the federated credentials trust.
	account, err := storage.NewStorageAccount(ctx, name+"-account", IssuerAccountArgs(args), parent, pulumi.Protect(true))
	if err != nil {
		return nil, err
	}
	// Protect guards only against this program; the lock against anyone with write on the group.
	if _, err := authorization.NewManagementLockByScope(ctx, name+"-lock", &authorization.ManagementLockByScopeArgs{
		Scope: account.ID(), LockName: pulumi.String("clusterforge-issuer"), Level: pulumi.String("CanNotDelete"),
		Notes: pulumi.String("the service-account issuer: once its name is free, anyone may publish keys the workload identities trust"),
	}, parent); err != nil {
		return nil, err
	}
	container, err := storage.NewBlobContainer(ctx, name+"-container", &storage.BlobContainerArgs{
		AccountName: account.Name, ResourceGroupName: args.ResourceGroupName,
		ContainerName: pulumi.String(spec.IssuerContainer), PublicAccess: storage.PublicAccessBlob,
	}, parent, pulumi.Protect(true))
	if err != nil {
		return nil, err
	}
	for i, path := range []string{pki.IssuerDiscoveryPath, pki.IssuerKeysPath} {
		// A public key's documents: public, though the bundle they come from is secret.
		document := pulumi.Unsecret(args.PKI.ApplyT(func(v any) (pulumi.AssetOrArchive, error) {
			docs := [2][]byte{}
			var err error
			docs[0], docs[1], err = pki.IssuerDocuments(c.ServiceAccountIssuer(), v.(pki.Bundle).Pair(pki.ServiceAccountKey).CertPEM)
			return pulumi.NewStringAsset(string(docs[i])), err
		})).(pulumi.AssetOrArchiveOutput)
		if _, err := storage.NewBlob(ctx, name+"-"+path, &storage.BlobArgs{
			AccountName: account.Name, ResourceGroupName: args.ResourceGroupName, ContainerName: pulumi.String(spec.IssuerContainer),
			BlobName: pulumi.String(path), ContentType: pulumi.String("application/json"), Source: document,
		}, parent, pulumi.DependsOn([]pulumi.Resource{container})); err != nil {
			return nil, err
		}
	}
	return comp, ctx.RegisterResourceOutputs(comp, pulumi.Map{})
}

// NewWorkloadIdentity is a workload's identity (addons.AzureWorkloads): Entra ID gives its
// service account's tokens from the cluster's issuer, for Entra's audience, this identity's tokens.
func NewWorkloadIdentity(ctx *pulumi.Context, name string, args *RoleIdentityArgs, opts ...pulumi.ResourceOption) (*RoleIdentity, error) {
	id, err := NewRoleIdentity(ctx, name, args, opts...)
	if err != nil {
		return nil, err
	}
	f := addons.FederationOf(args.Cluster, args.Role)
	_, err = managedidentity.NewFederatedIdentityCredential(ctx, name+"-federated", &managedidentity.FederatedIdentityCredentialArgs{
		ResourceGroupName: args.ResourceGroupName, ResourceName: id.Name,
		FederatedIdentityCredentialResourceName: pulumi.String("kubernetes-" + args.Role),
		Issuer:                                  pulumi.String(f.Issuer),
		Subject:                                 pulumi.String(f.Subject),
		Audiences:                               pulumi.StringArray{pulumi.String(f.Audience)},
	}, pulumi.Parent(id))
	return id, err
}
