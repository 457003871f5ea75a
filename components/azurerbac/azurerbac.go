// Package azurerbac is what each identity of a cluster may do on Azure: the role assignments the
// Pulumi program makes (Grants) and the custom roles it defines, least privilege per caller.
package azurerbac

import (
	"github.com/clusterforge/clusterforge/components/addons"
	"github.com/clusterforge/clusterforge/components/spec"
	"github.com/clusterforge/clusterforge/components/wellknown"
)

// Azure built-in role definition ids.
const (
	RoleVirtualMachineContributor  = "9980e02c-c2be-4d73-94e8-173b1dc7cf3c"
	RoleStorageBlobDataContributor = "ba92f5b4-2d11-453d-a403-e96b0029c9fe"
	RoleStorageBlobDataReader      = "2a2b9908-6ea1-4ae2-8e65-a410df84e7d1"
)

// Custom roles clusterforge defines per cluster, each holding only the actions its consumer calls
// where no built-in role is that narrow.
const (
	RoleScaleSetLister          = "scale-set-lister"
	RoleMachineLister           = "machine-lister"
	RoleOperationReader         = "operation-reader"
	RoleScaleSetScaler          = "scale-set-scaler"
	RoleScaleSetInstanceRemover = "scale-set-instance-remover"
	RoleScaleSetInstanceReader  = "scale-set-instance-reader"
	RoleBirthRecorder           = "birth-recorder"
)

// CustomRoleActions are the actions of each custom role.
var CustomRoleActions = map[string][]string{
	RoleScaleSetLister: {"Microsoft.Compute/virtualMachineScaleSets/read"},
	// Azure authorizes a list at the resource group; cluster-autoscaler lists its VMs even in scale-set mode.
	// And it polls what it started, which Azure authorizes at the resource group, not the resource.
	RoleMachineLister:   {"Microsoft.Compute/virtualMachineScaleSets/read", "Microsoft.Compute/virtualMachines/read", operationsRead},
	RoleOperationReader: {operationsRead},
	// Not Virtual Machine Contributor: its run command, extensions and instance writes are root on every
	// node. Azure has no action narrower than write for a scale set's capacity; the autoscaler's PUT
	// carries only the sku, so it names no subnet or identity that Azure would check as well.
	RoleScaleSetScaler: {"Microsoft.Compute/virtualMachineScaleSets/read", "Microsoft.Compute/virtualMachineScaleSets/write",
		"Microsoft.Compute/virtualMachineScaleSets/delete/action", "Microsoft.Compute/virtualMachineScaleSets/virtualMachines/read"},
	RoleScaleSetInstanceRemover: {"Microsoft.Compute/virtualMachineScaleSets/virtualMachines/read", "Microsoft.Compute/virtualMachineScaleSets/virtualMachines/delete"},
	RoleScaleSetInstanceReader: {"Microsoft.Compute/virtualMachineScaleSets/read", "Microsoft.Compute/virtualMachineScaleSets/virtualMachines/read",
		"Microsoft.Compute/virtualMachineScaleSets/virtualMachines/networkInterfaces/read"},
}

// operationsRead polls a long-running operation (a deletion, a resize): its URL lies under no
// resource, and Azure checks the read at the resource group of the caller's grants.
const operationsRead = "Microsoft.Compute/locations/operations/read"

// CustomRoleDataActions are the data actions of each custom role that holds some.
var CustomRoleDataActions = map[string][]string{
	// Reads and creates blobs, never overwrites or deletes one, nor touches the container
	// (Storage Blob Data Contributor may do all three).
	RoleBirthRecorder: {"Microsoft.Storage/storageAccounts/blobServices/containers/blobs/read", "Microsoft.Storage/storageAccounts/blobServices/containers/blobs/add/action"},
}

// IsCustom says whether role is one clusterforge defines (CustomRoleActions, CustomRoleDataActions).
func IsCustom(role string) bool {
	_, actions := CustomRoleActions[role]
	_, data := CustomRoleDataActions[role]
	return actions || data
}

// BuiltInRoleActions are the Compute actions of built-in roles (Virtual Machine Contributor holds
// more, on networks and disks), as the stand-ins authorize them for an operator.
var BuiltInRoleActions = map[string][]string{
	RoleVirtualMachineContributor: {"Microsoft.Compute/virtualMachineScaleSets/*", "Microsoft.Compute/virtualMachines/*", "Microsoft.Compute/locations/*"},
}

// Scopes a grant can name. The plural ones stand for one assignment per resource.
const (
	ScopeResourceGroup     = "resourceGroup"
	ScopeWorkerScaleSets   = "workerScaleSets"
	ScopeAPIServerScaleSet = "apiserverScaleSet"
	ScopeBackupContainer   = "backupContainer"
	ScopeBirths            = "birthsContainer"
	ScopeRetirements       = "retirementsContainer"
)

// Grant is one role of a machine role's identity, at a scope, for the component that calls it.
type Grant struct {
	Role     string
	Scope    string
	Consumer string
}

// Grants is the least privilege of each identity, a machine role's or a workload's
// (addons.AzureWorkloads): a grant exists only for a component that calls Azure with it.
// cluster-autoscaler (L19) lists the resource group's scale sets and VMs, reads the worker scale
// sets' instances, sets their capacity and deletes their instances. clusterforge-ops's remediation reads and
// deletes the instance of a machine it hands back and polls that deletion, and reads the apiserver
// scale set's repairs state, nothing more. The
// main etcd's backup agent writes, lists, reads and prunes snapshots in its container, adds births
// to the birth registry and reads its retirements. The apiserver machines' CSR approver reads the
// worker instance a joining node claims to be.
// Nothing else calls Azure: the apiservers run no cloud provider, machines learn who they are
// from the instance metadata, which needs no grant, and the worker pools' identities hold
// nothing, so a token from a worker's metadata service opens nothing.
func Grants(principal string) []Grant {
	switch principal {
	case spec.RoleEtcdMain:
		return []Grant{
			{RoleStorageBlobDataContributor, ScopeBackupContainer, "clusterforge-etcd-backup (L02): writes, lists, verifies and prunes the snapshots"},
			{RoleBirthRecorder, ScopeBirths, "clusterforge-etcd-backup: records each etcd cluster ID that had quorum"},
			// Only an operator retires a cluster (forge retire).
			{RoleStorageBlobDataReader, ScopeRetirements, "clusterforge-etcd-backup: reads which etcd cluster IDs an operator retired"},
		}
	case spec.RoleAPIServer:
		return []Grant{{RoleScaleSetInstanceReader, ScopeWorkerScaleSets, "clusterforge-csr-approver: reads the instance a joining node's attested document must name, its scale set's placement tags, and the addresses of its network interface, which a serving certificate may name"}}
	case addons.AutoscalerName:
		const ca = "cluster-autoscaler (L19): "
		return []Grant{
			{RoleMachineLister, ScopeResourceGroup, ca + "lists the resource group's scale sets and virtual machines (both fatal at start-up if refused), and polls its resizes and deletions"},
			{RoleScaleSetScaler, ScopeWorkerScaleSets, ca + "reads a worker scale set's instances, sets its capacity and deletes its instances"},
		}
	case wellknown.OpsName:
		return []Grant{
			{RoleScaleSetInstanceRemover, ScopeWorkerScaleSets, "clusterforge-ops (L36): remediation reads and deletes the instance of a machine it hands back"},
			{RoleOperationReader, ScopeResourceGroup, "clusterforge-ops (L36): polls the deletion it started, which Azure authorizes at the resource group"},
			{RoleScaleSetLister, ScopeAPIServerScaleSet, "clusterforge-ops (L05): reads whether the apiserver scale set's automatic repairs are suspended"},
		}
	}
	return nil
}
