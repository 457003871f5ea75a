package wellknown

// Labels clusterforge sets on every node of a pool.
const (
	// PoolLabel names the pool a node belongs to.
	PoolLabel = "clusterforge.io/pool"
	// GPULabel marks the nodes of GPU pools.
	GPULabel = "clusterforge.io/gpu"
)

// Taints of the fleet operations layer (components/ops), which the add-ons that register its
// webhooks and the code that acts on them must agree on.
const (
	// ReplaceTaint is remediation's mark on a node it hands back; AutoscalerDeletionTaint is
	// cluster-autoscaler's before it deletes a VM. The scale-down brake reviews both (L14).
	ReplaceTaint            = "clusterforge.io/replace"
	AutoscalerDeletionTaint = "ToBeDeletedByClusterAutoscaler"
	// TeamKey is the team taint's key on owned nodes and the team label on namespaces (L17).
	TeamKey = "clusterforge.io/team"
	// PreflightTaint (NoSchedule, value PreflightPending) keeps work off a GPU node from its
	// registration until its preflight tests pass and the preflight agent removes it (L36).
	// cluster-autoscaler counts it as a startup taint.
	PreflightTaint   = "clusterforge.io/preflight"
	PreflightPending = "pending"
)

// Annotations the remediation controller writes on a node it marks: why, and since when.
// EvacuateAnnotation says the controller cordoned the node ahead of maintenance, and why: only
// such a cordon is lifted when the maintenance is over. DrainedAnnotation is the controller's
// word to the node's maintenance watcher: the node is drained (the value is when), so its events
// may start early.
const (
	ReasonAnnotation   = "clusterforge.io/replace-reason"
	SinceAnnotation    = "clusterforge.io/replace-since"
	EvacuateAnnotation = "clusterforge.io/maintenance-drain"
	DrainedAnnotation  = "clusterforge.io/maintenance-drained"
)

// Node conditions the node agents set, each on its own node: node-problem-detector the kernel's
// (NodeProblemConditions), the clusterforge-ops agent preflight's and Azure maintenance's.
// Remediation marks a node on each; the node agents' admission policy lets each agent change only
// its own.
const (
	KernelDeadlockCondition       = "KernelDeadlock"
	ReadonlyFilesystemCondition   = "ReadonlyFilesystem"
	NetworkProblemCondition       = "NetworkProblem"
	GPUProblemCondition           = "GPUProblem"
	PreflightFailedCondition      = "PreflightFailed"
	MaintenanceScheduledCondition = "MaintenanceScheduled"
)

// NodeProblemConditions are node-problem-detector's conditions.
var NodeProblemConditions = []string{KernelDeadlockCondition, ReadonlyFilesystemCondition, NetworkProblemCondition, GPUProblemCondition}

// A joining node's client certificate request carries its attested document (the metadata
// service's JSON answer, its nonce bound to the request's key) and the resource ID of the
// instance it says it is; the CSR approver checks one against the other through Resource Manager.
const (
	AttestedDocumentAnnotation = "clusterforge.io/attested-document"
	InstanceAnnotation         = "clusterforge.io/instance"
)
