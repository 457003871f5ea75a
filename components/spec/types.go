// Package spec is the typed cluster specification: what a stack asks for, the defaults and
// sizing derived from its node count, and the validation that runs before anything is built.
//
// The life cycle mirrors etcd's embed.Config: Load (strict YAML) → Default (fill and size) →
// Validate (every error names its field and the fix). Renderers and Pulumi components only
// ever see a validated Cluster. This package imports nothing from Pulumi.
package spec

import "time"

// Cluster is the value of a stack's `clusterforge:cluster` config key.
type Cluster struct {
	// Name is the cluster's name and the prefix of every Azure resource and machine name.
	// Required; 3 to 20 lowercase letters, digits and '-', starting with a letter.
	Name string `yaml:"name"`

	// Location is the Azure region; one with availability zones (zonalRegions). Default "eastus2".
	Location string `yaml:"location"`

	// Zones are the availability zones machines are spread over, as text, each once. Default ["1", "2", "3"].
	Zones []string `yaml:"zones"`

	// TargetNodes is the worker node count the control plane is sized for (L09, L30); 1 to 20,000
	// and at least the pools' total maxNodes. Default: the sum of every pool's maxNodes.
	TargetNodes int `yaml:"targetNodes"`

	// Versions pins every binary the machines run. Defaults are the tested pins.
	Versions Versions `yaml:"versions"`

	// ControlPlaneImage is the Azure Compute Gallery image version id the etcd and apiserver
	// machines boot: a version of the image definition "control-plane" that
	// images/control-plane.pkr.hcl publishes. Required for `pulumi up`; `make plan` accepts the
	// placeholder default.
	ControlPlaneImage string `yaml:"controlPlaneImage"`

	// Image is the worker image version id CPU pools boot unless they name their own: a version of
	// the image definition "worker-cpu" (images/worker.pkr.hcl). Required for `pulumi up`; `make
	// plan` accepts the placeholder default.
	Image string `yaml:"image"`

	// GPUImage is the worker image version id GPU pools boot unless they name their own: a version
	// of the image definition "worker-gpu" (images/worker.pkr.hcl). Required for `pulumi up` when a
	// pool has GPUs; `make plan` accepts the placeholder default.
	GPUImage string `yaml:"gpuImage"`

	// Admin is the break-glass SSH login, reachable only from the hub (L31).
	Admin Admin `yaml:"admin"`

	// Network is the spoke VNet, its subnets and the hub it peers with.
	Network Network `yaml:"network"`

	// EtcdMain is the main etcd cluster (L01, L02, L04).
	EtcdMain Etcd `yaml:"etcdMain"`

	// EtcdEvents is the separate etcd cluster that stores only Kubernetes Events (L03).
	EtcdEvents Etcd `yaml:"etcdEvents"`

	// Backup configures the snapshots of the main etcd to Azure Blob Storage (L02: its data
	// lives on local disks that Azure wipes). The events etcd is not backed up.
	Backup Backup `yaml:"backup"`

	// APIServer is the apiserver group; controller-manager and scheduler run on the same machines (L05).
	APIServer APIServer `yaml:"apiServer"`

	// Kubelet holds the node agent settings shared by every pool.
	Kubelet Kubelet `yaml:"kubelet"`

	// DNS sizes the cluster DNS (L13).
	DNS DNS `yaml:"dns"`

	// Autoscaler configures cluster-autoscaler's Azure provider over every pool (L19).
	Autoscaler Autoscaler `yaml:"autoscaler"`

	// Joins paces new nodes so their registrations do not swamp the apiservers (L11).
	Joins Joins `yaml:"joins"`

	// Pools are the worker pools; each becomes one or more scale sets. At most 16.
	Pools []Pool `yaml:"pools"`

	// Teams is what every team namespace gets (L17).
	Teams Teams `yaml:"teams"`

	// explicit holds a pointer to every field the stack set, so Default keeps an explicit zero.
	explicit map[any]bool
	// lines maps field paths to their line in the stack file, for Validate's errors.
	lines map[string]int
	// givenVNets is how many worker VNets the stack gives each pool; Default derives the rest.
	givenVNets []int
}

// Versions pins the binaries the machine image carries. Each default is versions.yaml's pin of
// the same key, the kubelet's aside.
type Versions struct {
	// Kubernetes is the kube-apiserver, controller-manager and scheduler version, and the
	// kubelet's unless Kubelet holds it back.
	Kubernetes string `yaml:"kubernetes"`
	// Kubelet is the workers' kubelet and kube-proxy version. Default: Kubernetes. Pinned to what
	// the workers run, it holds them while the control plane moves one minor at a time, at most
	// KubeletSkewMinors ahead (Kubernetes' version-skew policy): the workers then roll once. While
	// held, the worker image's other versions may stay what the workers run too.
	Kubelet string `yaml:"kubelet"`
	// Etcd is the etcd version.
	Etcd string `yaml:"etcd"`
	// PauseImage is the pinned sandbox image every node preloads (L25).
	PauseImage string `yaml:"pauseImage"`
	// Containerd is the container runtime baked into node images.
	Containerd string `yaml:"containerd"`
	// Runc is the OCI runtime baked into node images.
	Runc string `yaml:"runc"`
	// Crictl is the CRI client baked into node images.
	Crictl string `yaml:"crictl"`
	// AzureCNI is the Azure container networking release baked into node images: its CNI plugins
	// (L29) and its NetworkPolicy engine, azure-npm.
	AzureCNI string `yaml:"azureCNI"`
	// CoreDNS is the cluster DNS image tag (L13).
	CoreDNS string `yaml:"coreDNS"`
	// ClusterAutoscaler is the cluster-autoscaler image tag (L19).
	ClusterAutoscaler string `yaml:"clusterAutoscaler"`
	// Prometheus is the Prometheus image tag (L06, L10, L34).
	Prometheus string `yaml:"prometheus"`
	// NodeExporter is the Prometheus node-exporter image tag.
	NodeExporter string `yaml:"nodeExporter"`
	// NodeProblemDetector is the node-problem-detector image tag, the node health agent (L35).
	NodeProblemDetector string `yaml:"nodeProblemDetector"`
	// NvidiaDevicePlugin is the NVIDIA device plugin image tag, which GPU nodes pull (it needs a
	// GPU to do anything, so clusterforge does not build it).
	NvidiaDevicePlugin string `yaml:"nvidiaDevicePlugin"`
}

// Admin is the SSH administrator of every machine.
type Admin struct {
	// Username is the Linux admin user: 1 to 32 of [a-z0-9_-], not a name Azure reserves. Default "clusteradmin".
	Username string `yaml:"username"`
	// SSHPublicKey is the OpenSSH public key allowed to log in: one ssh-ed25519 or ssh-rsa (2048+ bits)
	// line without options. Default: `pulumi up` generates one (stack output adminSshPrivateKey).
	SSHPublicKey string `yaml:"sshPublicKey"`
}

// Network describes the control plane's VNet; the workers' are the pools' (Pool.VNets). Every
// CIDR left empty is derived, then frozen by make freeze.
type Network struct {
	// AddressSpace is the control plane's VNet: a /23 by default, its two subnets.
	AddressSpace string `yaml:"addressSpace"`
	// ControlPlaneSubnet holds the apiservers and the internal load balancer. Default: first /24 of AddressSpace.
	ControlPlaneSubnet string `yaml:"controlPlaneSubnet"`
	// EtcdSubnet holds both etcd clusters. Default: second /24 of AddressSpace.
	EtcdSubnet string `yaml:"etcdSubnet"`
	// ServiceCIDR is the Kubernetes service range; it lives outside the VNet. Default "172.16.0.0/16".
	ServiceCIDR string `yaml:"serviceCIDR"`
	// APIServerIP is the internal load balancer's static frontend address. Default: 10th address of ControlPlaneSubnet.
	APIServerIP string `yaml:"apiServerIP"`
	// Hub is the existing hub VNet the cluster's VNets peer with, and no other cluster's (L31).
	Hub Hub `yaml:"hub"`
}

// Hub is the hub of the hub-and-spoke network (L31).
type Hub struct {
	// VNetID is the Azure resource id of the hub VNet. Required.
	VNetID string `yaml:"vnetId"`
	// AddressSpace is the hub VNet's CIDR: where researchers, SSH and the API clients come from. Required.
	AddressSpace string `yaml:"addressSpace"`
	// ReachWorkers peers the worker VNets with the hub too, so researchers reach nodes and pods by
	// address (L31); false peers only the control plane's VNet. Default true.
	ReachWorkers *bool `yaml:"reachWorkers"`
	// AddressesInUse are the private addresses in use in the hub and in the VNets peered with it
	// that no stack beside this one describes (`make plan` counts those stacks' own): they count in
	// the same 128,000 as the cluster's (docs/design/pod-network.md). Default 0.
	AddressesInUse int `yaml:"addressesInUse"`
}

// Etcd describes one etcd cluster of dedicated VMs.
type Etcd struct {
	// Members is the number of etcd VMs; odd, 1 to 7. Default 5 for etcdMain (L01), 3 for etcdEvents (5 above 7,500 nodes).
	Members int `yaml:"members"`
	// VMSize is the Azure VM size; it must have a local temp or NVMe disk for the data dir (L02). Default: sized from targetNodes.
	VMSize string `yaml:"vmSize"`
	// QuotaBackendBytes is etcd's --quota-backend-bytes in bytes, 1 GiB to 8 GiB (L04). Default: sized from targetNodes.
	QuotaBackendBytes int64 `yaml:"quotaBackendBytes"`
}

// Backup configures the main etcd's snapshots.
type Backup struct {
	// Interval is the age, as a Go duration from "1m" to "1h", at which the newest snapshot is
	// replaced. The recovery point is at most this, plus the agent's check period (a tenth of
	// it, at most 30 s) and one snapshot's upload. Default "3m".
	Interval string `yaml:"interval"`
}

// APIServer describes the apiserver scale set.
type APIServer struct {
	// Count is the number of apiserver machines, 2 to 15 (L05). Default 5.
	Count int `yaml:"count"`
	// VMSize is the Azure VM size. Default: sized from targetNodes for the apiserver heap (L09).
	VMSize string `yaml:"vmSize"`
	// MaxRequestsInflight is --max-requests-inflight. Default: sized from targetNodes (L09).
	MaxRequestsInflight int `yaml:"maxRequestsInflight"`
	// MaxMutatingRequestsInflight is --max-mutating-requests-inflight. Default: sized from targetNodes (L09).
	MaxMutatingRequestsInflight int `yaml:"maxMutatingRequestsInflight"`
	// AuditLogMaxBackup is --audit-log-maxbackup, the number of rotated audit files kept (L06). Default 10.
	AuditLogMaxBackup int `yaml:"auditLogMaxBackup"`
	// AuditLogMaxSizeMB is --audit-log-maxsize in megabytes (L06). Default 200.
	AuditLogMaxSizeMB int `yaml:"auditLogMaxSizeMB"`
	// EtcdCompactionInterval is --etcd-compaction-interval (L04). Default "5m".
	EtcdCompactionInterval string `yaml:"etcdCompactionInterval"`
}

// Kubelet holds the node agent settings.
type Kubelet struct {
	// MaxPods is every pool's default pods a node (pools[].maxPods). Default 30.
	MaxPods int `yaml:"maxPods"`
	// PodPidsLimit is the most processes and threads one pod may hold, so one team's fork bomb
	// cannot exhaust its node's (kernel.pid_max is 4,194,304). Default 32768.
	PodPidsLimit int `yaml:"podPidsLimit"`
	// MaxParallelImagePulls caps concurrent pulls once serializeImagePulls is off (L20). Default 10.
	MaxParallelImagePulls int `yaml:"maxParallelImagePulls"`
	// MaxConcurrentDownloads is containerd's layer downloads at once on a node, shared by its
	// parallel pulls (L24). Default 10, or fewer where targetNodes × (downloads + 16) would outrun
	// one NAT gateway's 16 × 64,512 SNAT ports (each VNet has its own, so the default is on the
	// safe side).
	MaxConcurrentDownloads int `yaml:"maxConcurrentDownloads"`
	// ImagePullProgressTimeout is how long containerd lets a pull make no progress before it
	// cancels it, as a Go duration (L23). Default "5m".
	ImagePullProgressTimeout string `yaml:"imagePullProgressTimeout"`
}

// DNS sizes CoreDNS.
type DNS struct {
	// Replicas is the CoreDNS replica count, one per node (L13). Default: 1 per 100 nodes, at least 2.
	Replicas int `yaml:"replicas"`
}

// Autoscaler is cluster-autoscaler's behaviour; per pool it scales between 0 and maxNodes (L19).
type Autoscaler struct {
	// MaxUnreadyPercentage is --max-total-unready-percentage: above this share of unready nodes the
	// autoscaler stops acting, so a fleet-wide failure is not "fixed" by deleting nodes. Default 10.
	MaxUnreadyPercentage int `yaml:"maxUnreadyPercentage"`
	// OkUnreadyCount is --ok-total-unready-count: unready nodes tolerated regardless of the share. Default 20.
	OkUnreadyCount int `yaml:"okUnreadyCount"`
	// ScaleDownUnneededTime is how long a node stays unneeded before removal, as a Go duration. Default "10m".
	ScaleDownUnneededTime string `yaml:"scaleDownUnneededTime"`
	// ScaleDownDelayAfterAdd pauses scale-down after a scale-up, as a Go duration. Default "10m".
	ScaleDownDelayAfterAdd string `yaml:"scaleDownDelayAfterAdd"`
	// MaxScaleDownParallelism is the most nodes removed at once. Default 10.
	MaxScaleDownParallelism int `yaml:"maxScaleDownParallelism"`
	// MaxNodeProvisionTime is how long a new VM may take to register before it counts as failed,
	// as a Go duration; large GPU sizes boot slowly. Default "20m".
	MaxNodeProvisionTime string `yaml:"maxNodeProvisionTime"`
}

// UnreadyTolerated is how many of total nodes a roll's gate lets be unready: the share
// cluster-autoscaler tolerates (MaxUnreadyPercentage), without its OkUnreadyCount floor, so a
// small cluster whose every node went NotReady is refused rather than rolled further.
func (a Autoscaler) UnreadyTolerated(total int) int {
	return total * a.MaxUnreadyPercentage / 100
}

// Teams is what the platform gives every team namespace (labelled clusterforge.io/team).
type Teams struct {
	// Quota is every team namespace's ResourceQuota, hard limits by resource name (object counts
	// such as "configmaps" or "count/jobs.batch"; "services.nodeports"; requests such as
	// "requests.nvidia.com/gpu"): object counts keep one team's runaway loop from filling etcd, and
	// no NodePort Service opens a port on every node's address. A name left out keeps its default
	// (DefaultTeamQuota); "0" forbids.
	Quota map[string]string `yaml:"quota"`
	// MaxObjectBytes is the largest object, as JSON, a team may write into its namespace;
	// MaxDataObjectBytes that of a ConfigMap or Secret (TeamDataResources). With the quota's
	// counts they bound how much of etcd-main one team can hold (Teams.Footprint).
	MaxObjectBytes     int64 `yaml:"maxObjectBytes"`
	MaxDataObjectBytes int64 `yaml:"maxDataObjectBytes"`
	// PriorityClasses are more classes a team's pods may run at beside the default and the borrow
	// class, e.g. an urgent run's above the default: a name of 1 to 63 lowercase letters, digits
	// and '-' (not system- or clusterforge-), and a value from MinTeamPriority to MaxTeamPriority.
	PriorityClasses []TeamPriorityClass `yaml:"priorityClasses"`
}

// TeamPriorityClass is one priority class teams may use.
type TeamPriorityClass struct {
	Name  string `yaml:"name"`
	Value int    `yaml:"value"`
}

// A team's class sits above the borrow class, which any owner's pod preempts, and below the
// add-ons', which no team pod may preempt.
const (
	MinTeamPriority = 101
	MaxTeamPriority = 999_999
	// MaxTeamPriorityClasses keeps the team placement policy's expression short.
	MaxTeamPriorityClasses = 16
)

// Joins paces node joins: a pool grows in steps, and each new node's kubelet starts after a random
// delay, so thousands of registrations do not reach the apiservers in the same second (L11).
type Joins struct {
	// Step is the most nodes a pool grows by at once: cluster-autoscaler's --max-nodes-per-scaleup
	// and `forge grow`'s increment, 1 to 5,000. Default: apiServer.count ×
	// maxMutatingRequestsInflight / 4, so a step's registrations (a handful of writes each, within
	// seconds) hold at most a quarter of the apiservers' mutating seats.
	Step int `yaml:"step"`
	// Pause is how long `forge grow` waits after a step's nodes are Ready before the next step, as a
	// Go duration from "0s" to "30m". Default "30s".
	Pause string `yaml:"pause"`
	// Jitter is the longest random delay before a worker's kubelet starts at boot, as a Go duration
	// from "0s" to "10m", used in whole seconds (rounded down); it spreads a step's (or a mass
	// reboot's) registrations. Default "30s".
	Jitter string `yaml:"jitter"`
}

// Pool is one worker pool.
type Pool struct {
	// Name is the pool's name; machines of the pool have role `worker-<name>`. Required; lowercase letters and digits, at most 12.
	Name string `yaml:"name"`
	// VMSize is the Azure VM size, e.g. Standard_D16ds_v5 or Standard_ND96isr_H100_v5, one of
	// vmSizes with a local disk. Required.
	VMSize string `yaml:"vmSize"`
	// Nodes is the instance count `pulumi up` creates; afterwards the autoscaler owns it (L19), and
	// the pool's balloon pods keep this many nodes warm (L15). 0 to 20,000. Default 0.
	Nodes int `yaml:"nodes"`
	// MaxNodes is the pool's capacity: the autoscaler's maximum, nodes to 20,000. Default: Nodes.
	MaxNodes int `yaml:"maxNodes"`
	// MaxPods is the pool's kubelet pod limit and its NICs' secondary IP configurations (L29, L30).
	// GPU pools, whose training jobs run one pod a node by pod IP (L33), need few. Default: kubelet.maxPods.
	MaxPods int `yaml:"maxPods"`
	// VNets are the pool's worker VNets, a /16 or larger each, holding its scale sets in order.
	// Default: as many as its scale sets need at maxNodes, frozen by make freeze.
	VNets []string `yaml:"vnets"`
	// Image is the gallery image version id the pool's machines boot: a version of "worker-gpu" for
	// GPU pools, of "worker-cpu" otherwise. Default: the cluster's gpuImage or image.
	Image string `yaml:"image"`
	// GPU marks the pool as GPU nodes (label and taint `nvidia.com/gpu`). Default: true for sizes with GPUs.
	GPU *bool `yaml:"gpu"`
	// Labels are added to every node of the pool: keys and values as the kubelet accepts them, none in
	// kubernetes.io or k8s.io but under node.kubernetes.io and kubelet.kubernetes.io.
	Labels map[string]string `yaml:"labels"`
	// Taints are registered with every node of the pool.
	Taints []Taint `yaml:"taints"`
	// System marks the one pool the platform's cluster-level add-ons run on (cluster-autoscaler,
	// clusterforge-ops, Prometheus), tainted `clusterforge.io/system` so that no team's pod lands
	// beside their Azure identities. Exactly one pool, without GPUs; teams run on the others.
	System bool `yaml:"system"`
}

// Taint is a node taint.
type Taint struct {
	// Key is the taint key, a qualified name outside kubernetes.io and k8s.io. Required.
	Key string `yaml:"key"`
	// Value is the taint value, at most 63 of [A-Za-z0-9._-].
	Value string `yaml:"value"`
	// Effect is NoSchedule, PreferNoSchedule or NoExecute. Default NoSchedule.
	Effect string `yaml:"effect"`
}

// IsGPU reports whether the pool runs GPU nodes.
func (p Pool) IsGPU() bool { return p.GPU != nil && *p.GPU }

// PauseDuration is Pause, parsed; valid once Validate passed.
func (j Joins) PauseDuration() time.Duration {
	d, _ := time.ParseDuration(j.Pause)
	return d
}

// JitterSeconds is Jitter in whole seconds, rounded down; valid once Validate passed.
func (j Joins) JitterSeconds() int {
	d, _ := time.ParseDuration(j.Jitter)
	return int(d / time.Second)
}
