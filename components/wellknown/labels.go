package wellknown

import (
	"fmt"
	"strconv"
	"strings"
)

// Labels that place pods on a pool's nodes: the CSR approver sets them on each worker's Node from
// its instance's scale set (the scale set's node-template tags, as Resource Manager reads them),
// under node-restriction.kubernetes.io/, which NodeRestriction lets no kubelet set, so no node
// chooses its own pool.
const (
	// PoolLabel names the pool a node belongs to.
	PoolLabel = "node-restriction.kubernetes.io/clusterforge-pool"
	// GPULabel marks the nodes of GPU pools.
	GPULabel = "node-restriction.kubernetes.io/clusterforge-gpu"
	// GangDomainLabel names the nodes one gang may span (spec.GangDomain): a PodGroup's topology
	// constraint, which the apiserver defaults to it, keeps a gang's pods on one value.
	GangDomainLabel = "node-restriction.kubernetes.io/clusterforge-gang-domain"
)

// PlacementLabels are the labels only the CSR approver sets.
var PlacementLabels = []string{PoolLabel, GPULabel, GangDomainLabel}

// Kubernetes' labels of where a node is. The CSR approver sets the region and zone on each
// worker's Node from its instance as Resource Manager describes it, the zone as cloud-provider-azure
// writes it and cluster-autoscaler's template nodes carry it (ZoneLabelValue). NodeRestriction would
// let a kubelet set all four; the node policies let it set none (InstanceLabels).
const (
	RegionLabel     = "topology.kubernetes.io/region"
	ZoneLabel       = "topology.kubernetes.io/zone"
	betaRegionLabel = "failure-domain.beta.kubernetes.io/region"
	betaZoneLabel   = "failure-domain.beta.kubernetes.io/zone"
)

// InstanceLabels are the labels of where a node is, which no kubelet sets.
var InstanceLabels = []string{RegionLabel, ZoneLabel, betaRegionLabel, betaZoneLabel}

// RegionLabelValue is a region's label value; ZoneLabelValue an availability zone's in it.
func RegionLabelValue(location string) string { return strings.ToLower(location) }

// ZoneLabelValue is the zone label's value of an instance in zone ("1") of location.
func ZoneLabelValue(location, zone string) string { return RegionLabelValue(location) + "-" + zone }

// Tag keys on Azure resources: every resource's cluster and role, and on worker scale sets
// cluster-autoscaler's node-template tags, which it reads to build a node of an empty scale set:
// a label of their nodes, a taint they register with, a resource they offer.
const (
	TagCluster              = "clusterforge.io/cluster"
	TagRole                 = "clusterforge.io/role"
	NodeTemplateLabelTag    = "k8s.io_cluster-autoscaler_node-template_label_"
	NodeTemplateTaintTag    = "k8s.io_cluster-autoscaler_node-template_taint_"
	NodeTemplateResourceTag = "k8s.io_cluster-autoscaler_node-template_resources_"
)

// LabelTag is the node-template tag of a label key, TaintTag of a taint key: Azure's tag names
// take no '/', and cluster-autoscaler reads each '_' back as '/' and each "~2" as '_'.
func LabelTag(key string) string { return NodeTemplateLabelTag + tagKey(key) }

// TaintTag is the node-template tag of a taint key; its value is "<value>:<effect>".
func TaintTag(key string) string { return NodeTemplateTaintTag + tagKey(key) }

// ResourceTag is the node-template tag of a resource name without '_' (cluster-autoscaler reads
// both '_' and "~2" back as '/').
func ResourceTag(name string) string {
	return NodeTemplateResourceTag + strings.ReplaceAll(name, "/", "_")
}

// TagLabel is the label key of a node-template label tag.
func TagLabel(tag string) (key string, ok bool) {
	rest, ok := strings.CutPrefix(tag, NodeTemplateLabelTag)
	return strings.ReplaceAll(strings.ReplaceAll(rest, "_", "/"), "~2", "_"), ok
}

func tagKey(key string) string {
	return strings.ReplaceAll(strings.ReplaceAll(key, "_", "~2"), "/", "_")
}

// Taints of the fleet operations layer (components/ops), which the add-ons that register its
// webhooks and the code that acts on them must agree on.
const (
	// ReplaceTaint is remediation's mark on a node it hands back; AutoscalerDeletionTaint is
	// cluster-autoscaler's before it deletes a VM. The scale-down brake reviews both (L14).
	ReplaceTaint            = "clusterforge.io/replace"
	AutoscalerDeletionTaint = "ToBeDeletedByClusterAutoscaler"
	// AutoscalerCandidateTaint (PreferNoSchedule) is cluster-autoscaler's mark on a node it finds
	// unneeded, before it decides to delete it.
	AutoscalerCandidateTaint = "DeletionCandidateOfClusterAutoscaler"
	// TeamKey is the team taint's key on owned nodes and the team label on namespaces (L17).
	TeamKey = "clusterforge.io/team"
	// SystemTaint (NoSchedule) keeps every pod but the platform's off the system pool, beside the
	// platform's Azure identities.
	SystemTaint = "clusterforge.io/system"
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
// service's JSON answer, its nonce bound to the request's key) and the provider ID of the
// instance it says it is; the CSR approver checks one against the other through Resource Manager.
const (
	AttestedDocumentAnnotation = "clusterforge.io/attested-document"
	ProviderIDAnnotation       = "clusterforge.io/provider-id"
)

// ComputerNameSuffix is how many characters Azure appends to a scale set's computer name prefix to
// name an instance; a worker's node name is that computer name.
const ComputerNameSuffix = 6

// ComputerName is the computer name Azure gives a scale set's instance: the prefix and the
// instance id in base 36, zero-padded to ComputerNameSuffix characters.
func ComputerName(prefix string, instanceID int64) string {
	return fmt.Sprintf("%s%0*s", prefix, ComputerNameSuffix, strconv.FormatInt(instanceID, 36))
}

// BreakGlassGroup is the group an operator impersonates to remove nodes past the scale-down
// brake, or while its webhook is down: only a cluster admin may impersonate a group, and the
// audit log records who did.
const BreakGlassGroup = "clusterforge:break-glass"

// The gang-room gate: the apiserver gives every gang's pod the scheduling gate and the label
// (addons.GangRoomPolicy); clusterforge-ops lifts both once one gang domain can hold the whole
// gang (components/ops/gangs). Until then neither the scheduler nor cluster-autoscaler sees the
// pod, so no scale set grows part way for a gang it cannot hold.
const (
	GangRoomGate  = "clusterforge.io/gang-room"
	GangRoomLabel = "clusterforge.io/gang-room"
	// GangRoomWaiting is GangRoomLabel's value while the gate holds.
	GangRoomWaiting = "waiting"
)
