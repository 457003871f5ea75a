package wellknown

// Objects of the fleet operations layer (components/ops, docs/design/fleet-operations.md) that
// the add-ons create and clusterforge-ops reads or serves.
const (
	// OpsName is the controller's Deployment, Service, service account and leader lease.
	OpsName = "clusterforge-ops"
	// OpsReplicas serve the webhooks, one a node of the system pool, which holds at least as many.
	OpsReplicas = 2
	// OpsServiceHost and OpsServicePort are where the apiservers dial the webhooks: the Service
	// in kube-system.
	OpsServiceHost = OpsName + ".kube-system.svc"
	OpsServicePort = 443
	// OpsBrakeLedger is the scale-down brake's ConfigMap of admitted removals.
	OpsBrakeLedger = "clusterforge-brake-ledger"
	// OpsBrakePath, OpsTeamsPath and OpsTeamObjectsPath are the webhooks' paths on the controller.
	OpsBrakePath       = "/brake"
	OpsTeamsPath       = "/teams"
	OpsTeamObjectsPath = "/team-objects"
	// BorrowPriority is the class of pods that may borrow other teams' idle nodes (L17): below
	// every owner's pod, so the owner's pods preempt them; above balloons.
	BorrowPriority = "clusterforge-borrow"
	// MutationLease is the cluster-side lock a roll holds from its first step to its last: one
	// roll at a time, whoever runs it and from wherever.
	MutationLease = "clusterforge-mutation"
)

// Kubernetes' own gangs (L16): the API group of PodGroups and Workloads, which the control plane
// serves from the minor where it is beta (machine.GangAPI).
const SchedulingGroup = "scheduling.k8s.io"
