package addons

import (
	"encoding/json"
	"slices"
	"strconv"
	"strings"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/api/resource"

	"github.com/clusterforge/clusterforge/components/machine"
	"github.com/clusterforge/clusterforge/components/pki"
	"github.com/clusterforge/clusterforge/components/spec"
	"github.com/clusterforge/clusterforge/components/wellknown"
)

// node-problem-detector is the node health agent (L35): it reads its node's kernel log and turns
// the lines that mean a broken machine into node conditions, which remediation acts on, and the
// passing ones into events.
const (
	NodeProblemDetectorName = "node-problem-detector"
	// KernelMonitorKey is the kernel log monitor's file in the ConfigMap, mounted at nodeHealthConfigDir.
	KernelMonitorKey    = "kernel-monitor.json"
	nodeHealthConfigDir = "/config"
	nodeHealthAddon     = "node-health"
)

func nodeProblemDetectorImage(c *spec.Cluster) BuiltImage {
	return BuiltImage{"registry.k8s.io/node-problem-detector/node-problem-detector:" + c.Versions.NodeProblemDetector,
		"addons/node-problem-detector", "/node-problem-detector"}
}

// NodeProblemDetectorResources are its requests and limits; NodeReserve leaves room for them.
var NodeProblemDetectorResources = corev1.ResourceRequirements{
	Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("10m"), corev1.ResourceMemory: resource.MustParse("40Mi")},
	Limits:   corev1.ResourceList{corev1.ResourceMemory: resource.MustParse("100Mi")},
}

// KernelLog is where node-problem-detector reads kernel lines from.
type KernelLog struct {
	// Plugin is node-problem-detector's log watcher: "kmsg" or "filelog".
	Plugin string
	// Path is the device or file, on the node and in the container.
	Path string
	// PluginConfig is filelog's line grammar (timestamp and message expressions, time layout).
	PluginConfig map[string]string
}

// Kmsg is a machine's own kernel log, as every Azure VM has it.
var Kmsg = KernelLog{Plugin: "kmsg", Path: "/dev/kmsg"}

// KernelLogFile is a file of kernel lines, one per line: an RFC 3339 time, " kernel: ", the
// message. It stands in for /dev/kmsg where machines share one kernel (the booted rehearsal).
func KernelLogFile(path string) KernelLog {
	return KernelLog{Plugin: "filelog", Path: path, PluginConfig: map[string]string{
		"timestamp": `^(\S+) kernel: `, "message": `^\S+ kernel: (.*)$`, "timestampFormat": time.RFC3339Nano}}
}

// kernelRule is one line of node-problem-detector's kernel monitor. A permanent rule sets its
// condition True until the agent restarts; a temporary one is an event. Patterns are Go regular
// expressions matched up to the end of the message.
type kernelRule struct {
	Type      string `json:"type"`
	Condition string `json:"condition,omitempty"`
	Reason    string `json:"reason"`
	Pattern   string `json:"pattern"`
}

// nvidiaXid is the driver's report of a GPU error: "NVRM: Xid (PCI:0000:3b:00): 79, pid=...".
const nvidiaXid = `NVRM: Xid \(PCI:[0-9a-fA-F:.]+\): `

// kernelRules are what the kernel log says about a broken machine. Conditions only for what a
// reboot or a new machine fixes; the rest are events for the record.
var kernelRules = []kernelRule{
	{"temporary", "", "OOMKilling", `Killed process \d+ (.+) total-vm:\d+kB, anon-rss:\d+kB, file-rss:\d+kB.*`},
	{"temporary", "", "TaskHung", `task \S+:\w+ blocked for more than \w+ seconds\.`},
	{"temporary", "", "KernelOops", `BUG: unable to handle kernel .*`},
	{"temporary", "", "KernelOops", `divide error: 0000 \[#\d+\] SMP.*`},
	{"temporary", "", "IOError", `Buffer I/O error .*`},
	{"temporary", "", "Ext4Error", `EXT4-fs error .*`},
	// The conntrack table drops new flows while full; the node recovers as flows end.
	{"temporary", "", "ConntrackFull", `nf_conntrack: (nf_conntrack: )?table full, dropping packet.*`},
	// The driver resets a NIC whose queue stalls; a NIC that stays broken says so below.
	{"temporary", "", "TransmitQueueTimedOut", `NETDEV WATCHDOG: \S+ \(\S+\): transmit queue \d+ timed out.*`},
	{"temporary", "", "GPUXid", nvidiaXid + `\d+,.*`},
	// The container runtime stuck in the kernel: no pod on the node starts or stops.
	{"permanent", wellknown.KernelDeadlockCondition, "ContainerdHung", `task containerd:\w+ blocked for more than \w+ seconds\.`},
	{"permanent", wellknown.KernelDeadlockCondition, "DockerHung", `task docker:\w+ blocked for more than \w+ seconds\.`},
	{"permanent", wellknown.ReadonlyFilesystemCondition, "FilesystemIsReadOnly", `.*Remounting filesystem read-only.*`},
	// The Mellanox NIC (Azure's accelerated networking and InfiniBand) gave up after its health checks.
	{"permanent", wellknown.NetworkProblemCondition, "NICHealthCompromised", `mlx5_core \S+: .*device's health compromised.*`},
	// Xids that need a GPU reset or a new machine (NVIDIA's Xid catalog): 48 double-bit ECC,
	// 74 NVLink, 79 fallen off the bus, 95 uncontained ECC, 119 and 120 GSP firmware.
	{"permanent", wellknown.GPUProblemCondition, "GPUXidFatal", nvidiaXid + `(48|74|79|95|119|120),.*`},
}

// kernelConditions are the conditions' healthy states, which the agent sets when it starts.
var kernelConditions = []map[string]string{
	{"type": wellknown.KernelDeadlockCondition, "reason": "KernelHasNoDeadlock", "message": "kernel has no deadlock"},
	{"type": wellknown.ReadonlyFilesystemCondition, "reason": "FilesystemIsNotReadOnly", "message": "Filesystem is not read-only"},
	{"type": wellknown.NetworkProblemCondition, "reason": "NICIsHealthy", "message": "no NIC reported a compromised health"},
	{"type": wellknown.GPUProblemCondition, "reason": "NoFatalGPUXid", "message": "no GPU reported a fatal Xid"},
}

// kernelMonitor is node-problem-detector's system log monitor configuration (its MonitorConfig).
type kernelMonitor struct {
	Plugin       string              `json:"plugin"`
	PluginConfig map[string]string   `json:"pluginConfig,omitempty"`
	LogPath      string              `json:"logPath"`
	Lookback     string              `json:"lookback"`
	BufferSize   int                 `json:"bufferSize"`
	Source       string              `json:"source"`
	Conditions   []map[string]string `json:"conditions"`
	Rules        []kernelRule        `json:"rules"`
}

// KernelMonitor is the kernel log monitor's configuration, reading log. Lines from up to five
// minutes before the agent started count, so a restarted agent finds again what its predecessor
// saw; the buffer joins up to 10 lines for a rule to match.
func KernelMonitor(log KernelLog) string {
	data, err := json.MarshalIndent(kernelMonitor{Plugin: log.Plugin, PluginConfig: log.PluginConfig, LogPath: log.Path,
		Lookback: "5m", BufferSize: 10, Source: "kernel-monitor", Conditions: kernelConditions, Rules: kernelRules}, "", "  ")
	if err != nil {
		panic(err) // strings and maps of strings always encode
	}
	return string(data) + "\n"
}

// NodeAgentsOwnNodePolicy names the admission policy that keeps each node agent to its own Node.
const NodeAgentsOwnNodePolicy = "clusterforge-node-agents-own-node"

// NodeNameExtra is the user extra in which the apiserver names the node a service account's
// token was bound to (its pod's node).
const NodeNameExtra = "authentication.kubernetes.io/node-name"

// NodeLabelsPolicy names the admission policy that keeps a kubelet from relabelling its Node.
const NodeLabelsPolicy = "clusterforge-node-labels"

// NodePodsPolicy names the admission policy that refuses every pod a node would create.
const NodePodsPolicy = "clusterforge-node-pods"

// NodeControllersPolicy names the admission policy that keeps each controller writing Nodes to its
// own taints, annotations and cordon.
const NodeControllersPolicy = "clusterforge-node-controllers"

// NodeRegistrationPolicy names the admission policy that holds a node to its pool's taints when it
// registers.
const NodeRegistrationPolicy = "clusterforge-node-registration"

// nodeHealth is node-problem-detector and the policies that hold the node agents and the kubelets
// to their nodes.
func nodeHealth(c *spec.Cluster) []Object {
	return slices.Concat(nodeProblemDetector(c), nodeAgentsOwnNode(), nodeControllers(), nodeLabels(), nodePods(), nodeAddresses(), nodeRegistration(c),
		nodeCapacity(c))
}

// NodeAddressesPolicy names the admission policy that keeps a node's host names its own name.
const NodeAddressesPolicy = "clusterforge-node-addresses"

// nodeDNSAddresses are the address types that carry a name rather than an IP.
var nodeDNSAddresses = []corev1.NodeAddressType{corev1.NodeHostName, corev1.NodeInternalDNS, corev1.NodeExternalDNS}

// nodeAddresses: a kubelet writes its own Node's addresses, and clients believe them (the
// apiserver dials a kubelet by them). The one name a node owns is its own, its instance's computer
// name, which its join proved; no node lists another (a Service's, another node's).
func nodeAddresses() []Object {
	types := make([]string, len(nodeDNSAddresses))
	for i, t := range nodeDNSAddresses {
		types[i] = string(t)
	}
	return admissionPolicy(NodeAddressesPolicy,
		admissionregistrationv1.MatchResources{ResourceRules: rules([]string{"nodes", "nodes/status"}, admissionregistrationv1.Create, admissionregistrationv1.Update)},
		[]admissionregistrationv1.MatchCondition{{Name: "nodes", Expression: quote(pki.NodesGroup) + " in request.userInfo.groups"}},
		nil,
		admissionregistrationv1.Validation{
			Expression: "object.status.?addresses.orValue([]).all(a, !(a.type in " + quoteList(types...) + ") || a.address == object.metadata.name)",
			Message:    "a node's only name among its addresses is its own",
		})
}

// nodePods: NodeRestriction lets a kubelet create mirror pods bound to itself, in any namespace,
// with any labels, and report their addresses; such a pod matching a Service's selector makes the
// node an endpoint of that Service (the platform's webhooks, cluster DNS). No clusterforge machine
// runs static pods, so a node creates none.
func nodePods() []Object {
	return admissionPolicy(NodePodsPolicy,
		admissionregistrationv1.MatchResources{ResourceRules: rules([]string{"pods"}, admissionregistrationv1.Create)},
		[]admissionregistrationv1.MatchCondition{{Name: "nodes", Expression: quote(pki.NodesGroup) + " in request.userInfo.groups"}},
		nil,
		admissionregistrationv1.Validation{Expression: "false",
			Message: "a node creates no pods: clusterforge machines run no static pods, and a mirror pod could make its node any Service's endpoint"})
}

// nodeAgentsOwnNode: RBAC cannot say "your own node" to a service account (the Node authorizer
// does it only for kubelets), nor "these fields", so the agents' right to update Nodes would reach
// every Node and every field. A pod's token names the node the pod was bound to (NodeNameExtra);
// this policy refuses an agent's update or patch of any other Node, and of anything on its own but
// what the agent owns: its conditions, and for the clusterforge-ops agent taking the preflight
// taint off. Labels, annotations, other taints, the cordon, addresses and capacity would move the
// node to another pool or team, or lie to the scheduler and the apiservers.
func nodeAgentsOwnNode() []Object {
	opsAgent, npd := quote(ServiceAccountUser(SystemNamespace, OpsAgentName)), quote(ServiceAccountUser(SystemNamespace, NodeProblemDetectorName))
	nodeName := quote(NodeNameExtra)
	preflight := quote(wellknown.PreflightTaint)
	return admissionPolicy(NodeAgentsOwnNodePolicy,
		admissionregistrationv1.MatchResources{ResourceRules: rules([]string{"nodes", "nodes/status"}, admissionregistrationv1.Update)},
		[]admissionregistrationv1.MatchCondition{{Name: "node-agents", Expression: "request.userInfo.username in [" + opsAgent + ", " + npd + "]"}},
		[]admissionregistrationv1.Variable{
			{Name: "ownConditions", Expression: "request.userInfo.username == " + opsAgent + " ? " +
				quoteList(wellknown.PreflightFailedCondition, wellknown.MaintenanceScheduledCondition) + " : " + quoteList(wellknown.NodeProblemConditions...)},
			{Name: "taints", Expression: "object.spec.?taints.orValue([])"},
			{Name: "oldTaints", Expression: "oldObject.spec.?taints.orValue([])"},
		},
		admissionregistrationv1.Validation{
			Expression: "has(request.userInfo.extra) && " + nodeName + " in request.userInfo.extra && " +
				"object.metadata.name in request.userInfo.extra[" + nodeName + "]",
			Message: "a node agent may change only the Node its pod runs on",
		},
		admissionregistrationv1.Validation{Expression: unchanged("metadata.?labels", "{}"),
			Message: "a node agent may not change its Node's labels"},
		admissionregistrationv1.Validation{Expression: unchanged("metadata.?annotations", "{}"),
			Message: "a node agent may not change its Node's annotations"},
		admissionregistrationv1.Validation{
			Expression: unchanged("metadata.?finalizers", "[]") + " && " + unchanged("metadata.?ownerReferences", "[]"),
			Message:    "a node agent may not change its Node's finalizers or owners"},
		admissionregistrationv1.Validation{Expression: unchanged("spec.?unschedulable", "false"),
			Message: "a node agent may not cordon or uncordon its Node"},
		admissionregistrationv1.Validation{
			Expression: "variables.taints == variables.oldTaints || request.userInfo.username == " + opsAgent + " && " +
				"variables.taints.filter(t, t.key != " + preflight + ") == variables.oldTaints.filter(t, t.key != " + preflight + ") && " +
				"variables.taints.size() < variables.oldTaints.size()",
			Message: "a node agent may not change its Node's taints; the clusterforge-ops agent may only take the preflight taint off",
		},
		admissionregistrationv1.Validation{Expression: sameFieldsBut("spec", "taints", "unschedulable"),
			Message: "a node agent may not change its Node's spec"},
		admissionregistrationv1.Validation{
			Expression: sameFieldsBut("status", "conditions") + " && " +
				"object.status.?conditions.orValue([]).filter(c, !(c.type in variables.ownConditions)) == " +
				"oldObject.status.?conditions.orValue([]).filter(c, !(c.type in variables.ownConditions))",
			Message: "a node agent may change only its own conditions in its Node's status",
		})
}

// nodeControllers: the controllers that may update and delete any Node (RBAC cannot name fields)
// change only what each owns, as its code writes it: cluster-autoscaler its two taints,
// clusterforge-ops the team and replace taints (no team's on a system node), its remediation
// annotations and the cordon, the preflight re-test the preflight taint, which it only adds. Each
// taint keeps its own effect and value, so no key becomes a NoExecute that evicts every pod. Never
// a label (the placement labels are the CSR approver's), another's taint or the rest of the spec;
// and each deletes only a Node it has marked for removal: a stolen token of one of them cannot
// move a node to another pool, untaint it for a team or empty the fleet.
func nodeControllers() []Object {
	autoscaler, ops, retest := quote(ServiceAccountUser(SystemNamespace, AutoscalerName)), quote(ServiceAccountUser(SystemNamespace, wellknown.OpsName)),
		quote(ServiceAccountUser(SystemNamespace, OpsRetestName))
	// Each controller's taints: their keys, each with the pattern of its value and effect.
	forms := func(pairs ...string) string {
		var entries []string
		for i := 0; i < len(pairs); i += 2 {
			entries = append(entries, quote(pairs[i])+": "+quote(pairs[i+1]))
		}
		return "{" + strings.Join(entries, ", ") + "}"
	}
	anyValue := func(effect string) string { return "^[^:]*:" + effect + "$" }
	ownTaints := "{" + autoscaler + ": " + forms(wellknown.AutoscalerDeletionTaint, anyValue("NoSchedule"), wellknown.AutoscalerCandidateTaint, anyValue("PreferNoSchedule")) +
		", " + ops + ": " + forms(wellknown.TeamKey, "^[^:]+:NoSchedule$", wellknown.ReplaceTaint, "^:NoSchedule$") +
		", " + retest + ": " + forms(wellknown.PreflightTaint, "^"+wellknown.PreflightPending+":NoSchedule$") + "}[request.userInfo.username]"
	ownAnnotations := "request.userInfo.username == " + ops + " ? " +
		quoteList(wellknown.ReasonAnnotation, wellknown.SinceAnnotation, wellknown.EvacuateAnnotation, wellknown.DrainedAnnotation) + " : []"
	removal := "{" + autoscaler + ": " + quote(wellknown.AutoscalerDeletionTaint) + ", " + ops + ": " + quote(wellknown.ReplaceTaint) + "}"
	update := func(expression string) string { return "request.operation == 'DELETE' || " + expression }
	return admissionPolicy(NodeControllersPolicy,
		admissionregistrationv1.MatchResources{ResourceRules: rules([]string{"nodes"}, admissionregistrationv1.Update, admissionregistrationv1.Delete)},
		[]admissionregistrationv1.MatchCondition{{Name: "node-controllers", Expression: "request.userInfo.username in [" + autoscaler + ", " + ops + ", " + retest + "]"}},
		[]admissionregistrationv1.Variable{
			{Name: "ownTaints", Expression: ownTaints},
			{Name: "ownAnnotations", Expression: ownAnnotations},
			{Name: "taints", Expression: "object.spec.?taints.orValue([])"},
			{Name: "oldTaints", Expression: "oldObject.spec.?taints.orValue([])"},
			{Name: "annotations", Expression: "object.metadata.?annotations.orValue({})"},
			{Name: "oldAnnotations", Expression: "oldObject.metadata.?annotations.orValue({})"},
		},
		admissionregistrationv1.Validation{
			Expression: "request.operation != 'DELETE' || request.userInfo.username in " + removal + " && " +
				"oldObject.spec.?taints.orValue([]).exists(t, t.key == " + removal + "[request.userInfo.username])",
			Message: "a node controller deletes only a Node it has marked for removal"},
		admissionregistrationv1.Validation{Expression: update(unchanged("metadata.?labels", "{}")),
			Message: "a node controller may not change a Node's labels"},
		admissionregistrationv1.Validation{
			Expression: update("variables.annotations.filter(k, !(k in variables.ownAnnotations)).all(k, k in variables.oldAnnotations && variables.oldAnnotations[k] == variables.annotations[k]) && " +
				"variables.oldAnnotations.filter(k, !(k in variables.ownAnnotations)).all(k, k in variables.annotations)"),
			Message: "a node controller may change only its own annotations on a Node"},
		admissionregistrationv1.Validation{
			Expression: update("variables.taints.filter(t, !(t.key in variables.ownTaints)) == variables.oldTaints.filter(t, !(t.key in variables.ownTaints))"),
			Message:    "a node controller may change only its own taints on a Node"},
		admissionregistrationv1.Validation{
			Expression: update("variables.taints.filter(t, t.key in variables.ownTaints).all(t, (t.?value.orValue('') + ':' + t.effect).matches(variables.ownTaints[t.key]))"),
			Message:    "a node controller sets its taints with their own effect and value only"},
		admissionregistrationv1.Validation{
			Expression: update("request.userInfo.username != " + retest + " || variables.oldTaints.filter(t, t.key in variables.ownTaints).all(t, t in variables.taints)"),
			Message:    "the preflight re-test only adds the preflight taint"},
		admissionregistrationv1.Validation{
			Expression: update("!variables.taints.exists(t, t.key == " + quote(wellknown.TeamKey) + ") || !variables.taints.exists(t, t.key == " + quote(wellknown.SystemTaint) + ")"),
			Message:    "no team owns a node of the system pool"},
		admissionregistrationv1.Validation{Expression: update("request.userInfo.username == " + ops + " || " + unchanged("spec.?unschedulable", "false")),
			Message: "only clusterforge-ops cordons or uncordons a Node"},
		admissionregistrationv1.Validation{Expression: update(sameFieldsBut("spec", "taints", "unschedulable")),
			Message: "a node controller may not change a Node's spec but its taints and cordon"},
		admissionregistrationv1.Validation{
			Expression: update(unchanged("metadata.?finalizers", "[]") + " && " + unchanged("metadata.?ownerReferences", "[]")),
			Message:    "a node controller may not change a Node's finalizers or owners"})
}

// unchanged is a CEL test that object's and oldObject's optional field path (`metadata.?labels`)
// are equal, empty standing for an absent one.
func unchanged(path, empty string) string {
	return "object." + path + ".orValue(" + empty + ") == oldObject." + path + ".orValue(" + empty + ")"
}

// sameFieldsBut is a CEL test that object's and oldObject's field (spec, status) have the same
// keys with the same values, the named keys aside.
func sameFieldsBut(field string, except ...string) string {
	skip := "!(k in " + quoteList(except...) + ")"
	obj, old := "object."+field+"", "oldObject."+field
	return "(!has(" + obj + ") && !has(" + old + ") || has(" + obj + ") && has(" + old + ") && " +
		obj + ".filter(k, " + skip + ").all(k, k in " + old + " && " + obj + "[k] == " + old + "[k]) && " +
		old + ".filter(k, " + skip + ").all(k, k in " + obj + "))"
}

// nodeLabels: NodeRestriction lets a kubelet change its Node's labels outside the kubernetes.io
// and k8s.io namespaces. The placement labels are the CSR approver's, under
// node-restriction.kubernetes.io/, which no kubelet may set; a pool's own labels (the stack's) a
// kubelet sets when it registers and never again, so this policy refuses any later change to them
// by a node. Within kubernetes.io, NodeRestriction lets a kubelet set its region and zone, which
// spread and place pods by failure domain and cluster-autoscaler matches against its template
// nodes; those are the approver's too (wellknown.InstanceLabels).
func nodeLabels() []Object {
	kubernetes := quote(kubernetesLabel)
	return admissionPolicy(NodeLabelsPolicy,
		admissionregistrationv1.MatchResources{ResourceRules: rules([]string{"nodes", "nodes/status"}, admissionregistrationv1.Update)},
		[]admissionregistrationv1.MatchCondition{{Name: "nodes", Expression: quote(pki.NodesGroup) + " in request.userInfo.groups"}},
		[]admissionregistrationv1.Variable{
			{Name: "labels", Expression: "object.metadata.?labels.orValue({})"},
			{Name: "oldLabels", Expression: "oldObject.metadata.?labels.orValue({})"},
		},
		admissionregistrationv1.Validation{
			Expression: "variables.labels.filter(k, !(k in variables.oldLabels) || variables.oldLabels[k] != variables.labels[k])" +
				".all(k, k.matches(" + kubernetes + ")) && " +
				"variables.oldLabels.filter(k, !(k in variables.labels)).all(k, k.matches(" + kubernetes + "))",
			Message: "a node may not change its labels outside kubernetes.io and k8s.io after it registers",
		},
		admissionregistrationv1.Validation{
			Expression: quoteList(wellknown.InstanceLabels...) + ".all(k, (k in variables.labels) == (k in variables.oldLabels) && " +
				"(!(k in variables.labels) || variables.labels[k] == variables.oldLabels[k]))",
			Message: "a node may not set or change its region or zone: the CSR approver sets them from its instance",
		})
}

// nodeRegistration: NodeRestriction lets a kubelet register its Node with any taints (it forbids
// changing them later), so root on a GPU or team node whose Node is gone (a reimage after
// remediation) could register without the taints that keep other pods away, or with another
// team's, and attract that team's pods with their Secrets. (The Node authorizer already refuses a
// node's deletion of its Node; the policy refuses it too, in case a binding ever grants it.) A node's name is its instance's computer name, which its join proved: its scale
// set's prefix and six characters. It registers with every taint its pool's kubelets register
// with (machine.RegisterTaints) and none a controller sets, may add others, and never deletes its
// Node; a node of no worker scale set registers not at all.
func nodeRegistration(c *spec.Cluster) []Object {
	var pools []string
	for _, s := range c.ScaleSets() {
		var taints []string
		for _, t := range machine.RegisterTaints(s.Pool) {
			taints = append(taints, t.Key+"="+t.Value+":"+t.Effect)
		}
		pools = append(pools, quote(s.AzureName)+": "+quoteList(taints...))
	}
	create := func(expression string) string { return "request.operation == 'DELETE' || " + expression }
	return admissionPolicy(NodeRegistrationPolicy,
		admissionregistrationv1.MatchResources{ResourceRules: rules([]string{"nodes"}, admissionregistrationv1.Create, admissionregistrationv1.Delete)},
		[]admissionregistrationv1.MatchCondition{{Name: "nodes", Expression: quote(pki.NodesGroup) + " in request.userInfo.groups"}},
		[]admissionregistrationv1.Variable{
			{Name: "pools", Expression: "{" + strings.Join(pools, ", ") + "}"},
			{Name: "scaleSet", Expression: scaleSetOfNode("variables.pools")},
			{Name: "taints", Expression: "object.spec.?taints.orValue([]).map(t, t.key + '=' + t.?value.orValue('') + ':' + t.effect)"},
		},
		admissionregistrationv1.Validation{Expression: "request.operation != 'DELETE'",
			Message: "a node does not delete its Node: registering anew would shed what the platform has set on it"},
		admissionregistrationv1.Validation{Expression: create("variables.scaleSet.size() == 1"),
			Message: "a node registers only under its instance's computer name in a worker scale set"},
		admissionregistrationv1.Validation{Expression: create("variables.scaleSet.all(p, variables.pools[p].all(t, t in variables.taints))"),
			Message: "a node registers with every taint of its pool"},
		admissionregistrationv1.Validation{
			Expression: create("!object.spec.?taints.orValue([]).exists(t, t.key in " + quoteList(controllerTaints...) + ")"),
			Message:    "a node registers with no taint a controller sets (a team's, a removal's)"},
		admissionregistrationv1.Validation{
			Expression: create("!" + quoteList(wellknown.InstanceLabels...) + ".exists(k, k in object.metadata.?labels.orValue({}))"),
			Message:    "a node registers with no region or zone: the CSR approver sets them from its instance"})
}

// scaleSetOfNode is the worker scale sets, among the keys of the map scaleSets, whose computer
// names the Node's name is: one, or none for a name no worker has.
func scaleSetOfNode(scaleSets string) string {
	return scaleSets + ".filter(s, object.metadata.name.startsWith(s) && size(object.metadata.name) == size(s) + " +
		strconv.Itoa(wellknown.ComputerNameSuffix) + ")"
}

// NodeCapacityPolicy names the admission policy that holds a node's GPUs to its VM size's.
const NodeCapacityPolicy = "clusterforge-node-capacity"

// nodeCapacity: a kubelet reports its own Node's capacity, and the scheduler believes it, so root
// on a worker could claim GPUs it lacks and draw GPU pods. A node reports at most its VM size's
// GPUs, in capacity and in allocatable: its scale set is the one its name, its instance's computer
// name, begins with (its join proved the name). A count that is not a plain integer is refused. CPU
// and memory are not held: an instance may report less than its size (the kernel's share).
func nodeCapacity(c *spec.Cluster) []Object {
	var sets []string
	for _, s := range c.ScaleSets() {
		size, _ := spec.VMCapacity(s.Pool.VMSize)
		sets = append(sets, quote(s.AzureName)+": "+strconv.Itoa(size.GPUs))
	}
	gpu := quote(machine.GPUResource)
	// Kubelets by their user (the name is the node's), not by their group: the rehearsal's simulated
	// nodes report as one member of the group for all, under names no scale set gives.
	return admissionPolicy(NodeCapacityPolicy,
		admissionregistrationv1.MatchResources{ResourceRules: rules([]string{"nodes", "nodes/status"}, admissionregistrationv1.Create, admissionregistrationv1.Update)},
		[]admissionregistrationv1.MatchCondition{{Name: "kubelets", Expression: "request.userInfo.username.startsWith(" + quote(pki.NodeUserPrefix) + ")"}},
		[]admissionregistrationv1.Variable{
			{Name: "gpus", Expression: "{" + strings.Join(sets, ", ") + "}"},
			{Name: "scaleSet", Expression: scaleSetOfNode("variables.gpus")},
			{Name: "most", Expression: "variables.scaleSet.size() == 1 ? variables.gpus[variables.scaleSet[0]] : 0"},
			{Name: "reported", Expression: "[object.?status.?capacity[?" + gpu + "].orValue('0'), object.?status.?allocatable[?" + gpu + "].orValue('0')]"},
		},
		admissionregistrationv1.Validation{
			Expression: "variables.reported.all(q, q.matches('^[0-9]{1,4}$') && int(q) <= variables.most)",
			Message:    "a node reports at most its VM size's GPUs (" + machine.GPUResource + "), as a plain integer",
		})
}

// controllerTaints are the taint keys the node controllers set, and no node registers with.
var controllerTaints = []string{wellknown.TeamKey, wellknown.ReplaceTaint, wellknown.AutoscalerDeletionTaint, wellknown.AutoscalerCandidateTaint}

// kubernetesLabel matches the label keys NodeRestriction governs (kubernetes.io and k8s.io and
// their subdomains): a regular expression, escaped for CEL by quote.
const kubernetesLabel = `^([^/]*\.)?(kubernetes|k8s)\.io/`

// nodeProblemDetector is the agent's DaemonSet on every worker. It gets its own node and patches
// its status (conditions), and writes events; it never lists or watches (L07).
func nodeProblemDetector(c *spec.Cluster) []Object {
	const config, kernelLog = "config", "kernel-log"
	objs := nodeAgent(SystemNamespace, NodeProblemDetectorName, corev1.PodSpec{
		Tolerations: []corev1.Toleration{{Operator: corev1.TolerationOpExists}},
		Containers: []corev1.Container{{
			Name:    NodeProblemDetectorName,
			Image:   nodeProblemDetectorImage(c).Ref,
			Command: []string{nodeProblemDetectorImage(c).Path},
			Args: []string{"--logtostderr", "--config.system-log-monitor=" + nodeHealthConfigDir + "/" + KernelMonitorKey,
				"--enable-k8s-exporter=true"},
			Env: []corev1.EnvVar{{Name: "NODE_NAME", ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{FieldPath: "spec.nodeName"}}}},
			// /dev/kmsg is a device: only a privileged container may open it.
			SecurityContext: &corev1.SecurityContext{Privileged: ptr(true)},
			Resources:       NodeProblemDetectorResources,
			VolumeMounts: []corev1.VolumeMount{
				{Name: config, MountPath: nodeHealthConfigDir, ReadOnly: true},
				{Name: kernelLog, MountPath: Kmsg.Path, ReadOnly: true},
			},
		}},
		Volumes: []corev1.Volume{
			{Name: config, VolumeSource: corev1.VolumeSource{ConfigMap: &corev1.ConfigMapVolumeSource{
				LocalObjectReference: corev1.LocalObjectReference{Name: NodeProblemDetectorName}}}},
			hostPath(kernelLog, Kmsg.Path),
		},
	})
	objs[0].(*corev1.ServiceAccount).AutomountServiceAccountToken = ptr(true)
	PodTemplate(objs[1]).Spec.AutomountServiceAccountToken = ptr(true)
	access := serviceAccount(SystemNamespace, NodeProblemDetectorName, []rbacv1.PolicyRule{
		{APIGroups: []string{""}, Resources: []string{"nodes"}, Verbs: []string{"get"}},
		{APIGroups: []string{""}, Resources: []string{"nodes/status"}, Verbs: []string{"patch"}},
		{APIGroups: []string{""}, Resources: []string{"events"}, Verbs: []string{"create", "patch", "update"}},
	}, nil)
	return append(append(objs, access[1:]...), // its own account is nodeAgent's
		&corev1.ConfigMap{ObjectMeta: meta(SystemNamespace, NodeProblemDetectorName, nil),
			Data: map[string]string{KernelMonitorKey: KernelMonitor(Kmsg)}})
}

// ReadKernelLogFrom points node-problem-detector at another kernel log: its monitor's
// configuration and the host path mounted where it reads.
func ReadKernelLogFrom(objs []Object, log KernelLog) {
	for _, o := range objs {
		if o.GetNamespace() != SystemNamespace || o.GetName() != NodeProblemDetectorName {
			continue
		}
		if cm, ok := o.(*corev1.ConfigMap); ok {
			cm.Data[KernelMonitorKey] = KernelMonitor(log)
		}
		t := PodTemplate(o)
		if t == nil {
			continue
		}
		file := corev1.HostPathFileOrCreate // the agent opens it before anything writes a line
		for i, v := range t.Spec.Volumes {
			if v.HostPath != nil && v.HostPath.Path == Kmsg.Path {
				t.Spec.Volumes[i].HostPath = &corev1.HostPathVolumeSource{Path: log.Path, Type: &file}
			}
		}
		for i, m := range t.Spec.Containers[0].VolumeMounts {
			if m.MountPath == Kmsg.Path {
				t.Spec.Containers[0].VolumeMounts[i].MountPath = log.Path
			}
		}
	}
}
