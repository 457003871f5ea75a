package processes

import (
	"context"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"maps"
	"math"
	"net/netip"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"

	"github.com/clusterforge/clusterforge/components/addons"
	"github.com/clusterforge/clusterforge/components/machine"
	"github.com/clusterforge/clusterforge/components/nodestatus"
	"github.com/clusterforge/clusterforge/components/pki"
	"github.com/clusterforge/clusterforge/components/spec"
	"github.com/clusterforge/clusterforge/components/wellknown"
	"github.com/clusterforge/clusterforge/test/machines"
	"github.com/clusterforge/clusterforge/test/scale"
)

// startLB starts the load balancer on the apiserver address, in front of every apiserver machine,
// probing as the Azure program configures it.
func (r *Rehearsal) startLB() error {
	proc, err := machines.StartProcess(r.LBCommand(), os.Environ(), r.Dir, filepath.Join(r.LogDir(), "lb.log"))
	if err != nil {
		return err
	}
	proc.Role, proc.Machine, proc.Name = "load-balancer", "lb", "lb"
	proc.URL = r.Cluster.APIServerURL()
	proc.CA, proc.Cert, proc.Key = r.PKIFile(pki.ClusterCA, "crt"), r.PKIFile(pki.Admin, "crt"), r.PKIFile(pki.Admin, "key")
	return r.track(proc)
}

// kwokConfig lets KWOK renew leases, play node and pod stages and take up the pods of new nodes
// in parallel, as thousands of kubelets do on their own: its defaults (4 at a time, and one node's
// pods at a time) fall behind a lease every 10 s past a few thousand nodes and take minutes to
// start the pods of a few hundred new ones, for want of KWOK, not of the control plane. Each
// lease worker waits for its renewal: 512 of them carry 10,000 nodes' 1,000 renewals a second up
// to half a second a renewal (64 carried 1,260 nodes' at the 2,500-node step).
//
// Its node stages are a kubelet's: KWOK's own, with leases, pick the heartbeat every 20 to 25 s
// that is meant for nodes without them (v0.7.0 inverted the choice). The first stage makes a node
// Ready; the heartbeat then reports status every scale.NodeStatusReport after the last report,
// the first time after the node's own phase (KWOKFirstStatusAnnotation), so that nodes registered
// together report apart, as kubelets started at different times do. A report changes only the
// conditions' times: the rest of the status is registered with the node (PoolNode), as a
// kubelet's first status is. The stage workers play 10,000 nodes' 33 reports a second.
var kwokConfig = fmt.Sprintf(`apiVersion: config.kwok.x-k8s.io/v1alpha1
kind: KwokConfiguration
options:
  nodeLeaseParallelism: 512
  nodePlayStageParallelism: 64
  podPlayStageParallelism: 16
  podsOnNodeSyncParallelism: 16
---
apiVersion: kwok.x-k8s.io/v1alpha1
kind: Stage
metadata:
  name: node-initialize
spec:
  resourceRef:
    apiGroup: v1
    kind: Node
  selector:
    matchExpressions:
    - key: '.status.conditions.[] | select( .type == "Ready" ) | .status'
      operator: NotIn
      values: ['True']
  next:
    statusTemplate: |
      {{ $now := Now }}
      {{ $since := $now }}
%[4]s      phase: Running
---
apiVersion: kwok.x-k8s.io/v1alpha1
kind: Stage
metadata:
  name: node-status-report
spec:
  resourceRef:
    apiGroup: v1
    kind: Node
  selector:
    matchExpressions:
    - key: '.status.phase'
      operator: In
      values: ['Running']
    - key: '.status.conditions.[] | select( .type == "Ready" ) | .status'
      operator: In
      values: ['True']
  delay:
    durationMilliseconds: %[1]d
    # The time of the next report, from the last: the node's phase after it was made Ready (its
    # heartbeat still the transition's), the report period after any later one.
    durationFrom:
      jq:
        expression: '[.status.conditions[]? | select(.type == "Ready")][0] as $r | ($r.lastHeartbeatTime | fromdate) + (if $r.lastHeartbeatTime == $r.lastTransitionTime then (.metadata.annotations["%[2]s"] | tonumber) else %[3]d end) | todate'
  next:
    statusTemplate: |
      {{ $now := Now }}
      {{ $since := $now }}
      {{ range .status.conditions }}{{ if eq .type "Ready" }}{{ $since = .lastTransitionTime }}{{ end }}{{ end }}
%[4]s  immediateNextStage: true
`, scale.NodeStatusReport.Milliseconds(), KWOKFirstStatusAnnotation, int(scale.NodeStatusReport.Seconds()), kwokConditions)

// kwokConditions is both node stages' status: every condition KWOK keeps, reported at $now, true
// since $since.
const kwokConditions = `      conditions:
      {{ range NodeConditions }}
      - lastHeartbeatTime: {{ $now | Quote }}
        lastTransitionTime: {{ $since | Quote }}
        message: {{ .message | Quote }}
        reason: {{ .reason | Quote }}
        status: {{ .status | Quote }}
        type: {{ .type | Quote }}
      {{ end }}
`

// kwokAccess is KWOK's role and its binding: the nodes it registers and heartbeats, their
// leases, the pods bound to them and their events.
func kwokAccess() []addons.Object {
	return userAccess(KWOKUser,
		rbacv1.PolicyRule{APIGroups: []string{""}, Resources: []string{"nodes", "pods"}, Verbs: []string{"get", "list", "watch", "create", "update", "patch", "delete"}},
		rbacv1.PolicyRule{APIGroups: []string{""}, Resources: []string{"nodes/status", "pods/status"}, Verbs: []string{"update", "patch"}},
		rbacv1.PolicyRule{APIGroups: []string{"coordination.k8s.io"}, Resources: []string{"leases"}, Verbs: []string{"get", "list", "watch", "create", "update", "patch", "delete"}},
		rbacv1.PolicyRule{APIGroups: []string{"", "events.k8s.io"}, Resources: []string{"events"}, Verbs: []string{"create", "update", "patch"}},
	)
}

// userAccess is a ClusterRole of rules, named as the user it is bound to.
func userAccess(user string, rules ...rbacv1.PolicyRule) []addons.Object {
	role := &rbacv1.ClusterRole{
		TypeMeta:   metav1.TypeMeta{APIVersion: "rbac.authorization.k8s.io/v1", Kind: "ClusterRole"},
		ObjectMeta: metav1.ObjectMeta{Name: user},
		Rules:      rules,
	}
	binding := &rbacv1.ClusterRoleBinding{
		TypeMeta:   metav1.TypeMeta{APIVersion: "rbac.authorization.k8s.io/v1", Kind: "ClusterRoleBinding"},
		ObjectMeta: metav1.ObjectMeta{Name: user},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: user},
		Subjects:   []rbacv1.Subject{{Kind: rbacv1.UserKind, APIGroup: rbacv1.GroupName, Name: user}},
	}
	return []addons.Object{role, binding}
}

// whileForbidden retries call while it is refused for 30 s at most: RBAC applied just now reaches
// each apiserver's authorizer through that apiserver's own watch, and the load balancer may send
// the call to one that has not seen it yet.
func whileForbidden(ctx context.Context, call func() error) error {
	deadline := time.Now().Add(30 * time.Second)
	for {
		err := call()
		if !apierrors.IsForbidden(err) || time.Now().After(deadline) {
			return err
		}
		select {
		case <-ctx.Done():
			return err
		case <-time.After(500 * time.Millisecond):
		}
	}
}

// startNodes starts KWOK and registers the simulated nodes, waiting until they are Ready.
func (r *Rehearsal) startNodes(ctx context.Context) error {
	nodes, err := r.Nodes()
	if err != nil {
		return err
	}
	if err := r.Apply(ctx, kwokAccess()...); err != nil {
		return err
	}
	kubeconfig := filepath.Join(r.Dir, "kwok.kubeconfig")
	if err := r.WriteKubeconfigAs(kubeconfig, KWOKUser, pki.NodesGroup); err != nil {
		return err
	}
	config := filepath.Join(r.Dir, "kwok.yaml")
	podStages, err := os.ReadFile(filepath.Join(filepath.Dir(r.Tools), "share", "kwok", "pod-stages.yaml"))
	if err != nil {
		return fmt.Errorf("KWOK's pod stages (scripts/toolchain.sh kwok installs them): %w", err)
	}
	if err := machines.WriteFile(config, kwokConfig+string(podStages), 0o644); err != nil {
		return err
	}
	argv := []string{filepath.Join(r.Tools, "kwok"),
		"--kubeconfig=" + kubeconfig, "--config=" + config, "--v=WARN",
		"--manage-all-nodes=false",
		"--manage-nodes-with-annotation-selector=" + KWOKAnnotation + "=fake",
		// Heartbeats through node leases, renewed every 10 s as a kubelet does: without them
		// KWOK's status heartbeats come about a minute apart, past the node controller's grace,
		// and every node flaps NotReady, which marks its pods unready for good.
		"--node-lease-duration-seconds=" + strconv.Itoa(int(scale.NodeLeaseDuration.Seconds())),
		// KWOK's pods take addresses of one range: the first pool's first worker VNet (deviation "addresses").
		"--cidr=" + r.Cluster.NodeSubnets()[0],
	}
	proc, err := machines.StartProcess(argv, os.Environ(), r.Dir, filepath.Join(r.LogDir(), "kwok.log"))
	if err != nil {
		return err
	}
	proc.Role, proc.Machine, proc.Name = "workers", "kwok", "kwok"
	if err := r.track(proc); err != nil {
		return err
	}
	cfg, err := r.KWOKRESTConfig()
	if err != nil {
		return err
	}
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return err
	}
	for _, n := range nodes {
		err := whileForbidden(ctx, func() error {
			_, err := cs.CoreV1().Nodes().Create(ctx, &n, metav1.CreateOptions{})
			return err
		})
		if err != nil && !apierrors.IsAlreadyExists(err) {
			return fmt.Errorf("register node %s: %w", n.Name, err)
		}
	}
	r.logf("registered %d KWOK nodes over %d pools", len(nodes), len(r.Cluster.Pools))
	return machines.Poll(ctx, time.Minute, "KWOK nodes", func(ctx context.Context) error {
		list, err := cs.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
		if err != nil {
			return err
		}
		ready := 0
		for _, n := range list.Items {
			if schedulable(n) {
				ready++
			}
		}
		if ready < len(nodes) {
			return fmt.Errorf("%d of %d nodes Ready and untainted by the node controller", ready, len(nodes))
		}
		return nil
	})
}

// schedulable: Ready, and the node controller has lifted its not-ready taint.
func schedulable(n corev1.Node) bool {
	for _, t := range n.Spec.Taints {
		if t.Key == corev1.TaintNodeNotReady {
			return false
		}
	}
	return nodestatus.IsReady(&n)
}

// KWOKAnnotation marks the nodes KWOK simulates.
const KWOKAnnotation = "kwok.x-k8s.io/node"

// KWOKFirstStatusAnnotation is how many seconds after it is made Ready a simulated node first
// reports its status (under scale.NodeStatusReport); its later reports are that far apart.
const KWOKFirstStatusAnnotation = "clusterforge.io/kwok-first-status-after"

// Nodes are the simulated worker nodes: per pool, up to NodesPerPool of its maxNodes.
func (p *Layout) Nodes() ([]corev1.Node, error) {
	var nodes []corev1.Node
	for i, pool := range p.Cluster.Pools {
		for n := range min(pool.MaxNodes, p.NodesPerPool) {
			node, err := p.PoolNode(i, n)
			if err != nil {
				return nil, err
			}
			nodes = append(nodes, node)
		}
	}
	return nodes, nil
}

// PoolNode is the n-th simulated node of pool i, named <cluster>-<pool>-<n>, with the labels and
// taints its kubelet registers and its VM size's capacity.
func (p *Layout) PoolNode(i, n int) (corev1.Node, error) {
	pool := p.Cluster.Pools[i]
	capacity, ok := spec.VMCapacity(pool.VMSize)
	if !ok {
		return corev1.Node{}, &spec.FieldError{Field: fmt.Sprintf("pools[%d].vmSize", i),
			Problem: fmt.Sprintf("the rehearsal does not know the capacity of %s", pool.VMSize),
			Fix:     "add the size to spec.VMCapacity's table"}
	}
	res := corev1.ResourceList{
		corev1.ResourceCPU:    *resource.NewQuantity(int64(capacity.CPUs), resource.DecimalSI),
		corev1.ResourceMemory: *resource.NewQuantity(int64(capacity.MemoryGiB)<<30, resource.BinarySI),
		corev1.ResourcePods:   *resource.NewQuantity(int64(pool.MaxPods), resource.DecimalSI),
		// The kubelet's root dir is on the local disk (L22); it reports both huge page sizes.
		corev1.ResourceEphemeralStorage:        *resource.NewQuantity(int64(capacity.LocalDiskGiB)<<30, resource.BinarySI),
		corev1.ResourceHugePagesPrefix + "1Gi": *resource.NewQuantity(0, resource.DecimalSI),
		corev1.ResourceHugePagesPrefix + "2Mi": *resource.NewQuantity(0, resource.DecimalSI),
	}
	if capacity.GPUs > 0 {
		res[machine.GPUResource] = *resource.NewQuantity(int64(capacity.GPUs), resource.DecimalSI)
	}
	// What the kubelet's reservation leaves its pods (the kubelet config's kubeReserved,
	// systemReserved and memory eviction threshold).
	allocatable := res.DeepCopy()
	cpuMilli, memory := spec.Allocatable(capacity, pool.MaxPods)
	allocatable[corev1.ResourceCPU] = *resource.NewMilliQuantity(cpuMilli, resource.DecimalSI)
	allocatable[corev1.ResourceMemory] = *resource.NewQuantity(memory, resource.BinarySI)
	var taints []corev1.Taint
	for _, t := range machine.NodeTaints(pool) {
		taints = append(taints, corev1.Taint{Key: t.Key, Value: t.Value, Effect: corev1.TaintEffect(t.Effect)})
	}
	name := fmt.Sprintf("%s-%s-%d", p.Cluster.Name, pool.Name, n)
	labels := machine.NodeLabels(pool)
	if labels == nil {
		labels = map[string]string{}
	}
	// The CSR approver's on a real node, of the scale set the autoscaler would grow in turn.
	var sets []spec.ScaleSet
	for _, s := range p.Cluster.ScaleSets() {
		if s.Pool.Name == pool.Name {
			sets = append(sets, s)
		}
	}
	maps.Copy(labels, machine.PlacementOf(sets[n%len(sets)]))
	maps.Copy(labels, map[string]string{
		corev1.LabelHostname:           name,
		corev1.LabelOSStable:           "linux",
		corev1.LabelArchStable:         "amd64",
		corev1.LabelInstanceTypeStable: pool.VMSize,
	})
	// Where it is, as the CSR approver labels a real node from its instance.
	labels[wellknown.RegionLabel] = wellknown.RegionLabelValue(p.Cluster.Location)
	labels[wellknown.ZoneLabel] = wellknown.ZoneLabelValue(p.Cluster.Location, p.Cluster.Zones[n%len(p.Cluster.Zones)])
	// Each node first reports at its own point of the report period, spread evenly whatever the
	// node count (the golden ratio's sequence), never at once.
	firstStatus := time.Duration(1+int(math.Mod(float64(n+1)*math.Phi, 1)*(scale.NodeStatusReport.Seconds()-1))) * time.Second
	return corev1.Node{
		ObjectMeta: metav1.ObjectMeta{Name: name, Labels: labels, Annotations: map[string]string{
			KWOKAnnotation: "fake", KWOKFirstStatusAnnotation: strconv.Itoa(int(firstStatus.Seconds()))}},
		Spec: corev1.NodeSpec{Taints: taints},
		Status: corev1.NodeStatus{Capacity: res, Allocatable: allocatable,
			Addresses: []corev1.NodeAddress{
				{Type: corev1.NodeInternalIP, Address: simulatedNodeIP(pool, n).String()},
				{Type: corev1.NodeHostName, Address: name},
			},
			DaemonEndpoints:  corev1.NodeDaemonEndpoints{KubeletEndpoint: corev1.DaemonEndpoint{Port: wellknown.KubeletPort}},
			NodeInfo:         simulatedNodeInfo(p.Cluster, name),
			Images:           simulatedImages(p.Cluster),
			RuntimeHandlers:  simulatedRuntimeHandlers(pool),
			Features:         &corev1.NodeFeatures{SupplementalGroupsPolicy: ptr.To(true)},
			DeclaredFeatures: simulatedDeclaredFeatures,
		},
	}, nil
}

// simulatedRuntimeHandlers are what containerd 2.3 tells the kubelet of its runtimes: the
// default one, unnamed, and the one the worker image's config names (machine.ContainerdConfig).
func simulatedRuntimeHandlers(pool spec.Pool) []corev1.NodeRuntimeHandler {
	features := &corev1.NodeRuntimeHandlerFeatures{RecursiveReadOnlyMounts: ptr.To(true), UserNamespaces: ptr.To(true)}
	runtime := "runc"
	if pool.IsGPU() {
		runtime = "nvidia"
	}
	return []corev1.NodeRuntimeHandler{{Name: "", Features: features}, {Name: runtime, Features: features}}
}

// simulatedDeclaredFeatures are the features a kubelet of the pinned release declares on its node
// (read off a booted worker's status).
var simulatedDeclaredFeatures = []string{"ExtendWebSocketsToKubelet", "InPlacePodLevelResourcesVerticalScaling",
	"InPlacePodVerticalScalingInitContainers", "RestartAllContainersOnContainerExits"}

// simulatedNodeIP is the n-th address of the pool's first VNet, past Azure's reserved first four.
// KWOK routes nothing: the address is there for the Node's size and shape (deviation "addresses").
func simulatedNodeIP(pool spec.Pool, n int) netip.Addr {
	a := netip.MustParsePrefix(pool.VNets[0]).Masked().Addr().As4()
	v := binary.BigEndian.Uint32(a[:]) + 4 + uint32(n)
	binary.BigEndian.PutUint32(a[:], v)
	return netip.AddrFrom4(a)
}

// simulatedNodeInfo is what a worker's kubelet reports of its machine: identifiers derived from
// the node's name, the versions from the stack, the OS of the node image.
func simulatedNodeInfo(c *spec.Cluster, name string) corev1.NodeSystemInfo {
	id := sha256.Sum256([]byte(name))
	return corev1.NodeSystemInfo{
		MachineID:               hex.EncodeToString(id[:16]),
		SystemUUID:              uuid(id[16:32]),
		BootID:                  uuid(id[:16]),
		KernelVersion:           simulatedKernel,
		OSImage:                 simulatedOSImage,
		ContainerRuntimeVersion: "containerd://" + strings.TrimPrefix(c.Versions.Containerd, "v"),
		KubeletVersion:          c.Versions.Kubelet,
		RunningInUserNamespace:  ptr.To(false),
		OperatingSystem:         "linux",
		Architecture:            "amd64",
	}
}

// The node image's OS and kernel as a kubelet names them (a Debian 12 cloud kernel).
const (
	simulatedOSImage = "Debian GNU/Linux 12 (bookworm)"
	simulatedKernel  = "6.1.0-40-cloud-amd64"
)

func uuid(b []byte) string {
	h := hex.EncodeToString(b)
	return h[0:8] + "-" + h[8:12] + "-" + h[12:16] + "-" + h[16:20] + "-" + h[20:32]
}

// nodeStatusMaxImages is how many images a kubelet lists in its node's status (its default).
const nodeStatusMaxImages = 50

// simulatedImages is the image list of a busy worker: what the node image preloads (the pause
// image and every add-on's), then the teams' training images it pulled, nodeStatusMaxImages in
// all, each named by digest and by tag as containerd reports them.
func simulatedImages(c *spec.Cluster) []corev1.ContainerImage {
	refs := []string{c.Versions.PauseImage}
	for _, b := range addons.BuiltImages(c) {
		refs = append(refs, b.Ref)
	}
	for i := 0; len(refs) < nodeStatusMaxImages; i++ {
		refs = append(refs, fmt.Sprintf("%s.azurecr.io/team-%02d/trainer:2026.11.%02d-cu128", c.Name, i%20, i))
	}
	images := make([]corev1.ContainerImage, len(refs))
	for i, ref := range refs {
		digest := sha256.Sum256([]byte(ref))
		repo := ref[:strings.LastIndex(ref, ":")]
		images[i] = corev1.ContainerImage{Names: []string{repo + "@sha256:" + hex.EncodeToString(digest[:]), ref}, SizeBytes: (int64(digest[0]) + 1) << 26}
	}
	return images
}

// KWOKUser is who KWOK acts as: a member of system:nodes, so that priority and fairness classes
// its node heartbeats and lease renewals as it classes kubelets' (flow schemas system-node-high
// and system-nodes), not as an exempt administrator's. It is not named system:node:<node>: the
// Node authorizer and NodeRestriction would confine it to that one node, and KWOK acts for all;
// RBAC grants it what their kubelets do together (kwokAccess).
const KWOKUser = "clusterforge:kwok"

// KWOKRESTConfig is KWOK's identity as a client: what registers the simulated nodes.
func (p *Layout) KWOKRESTConfig() (*rest.Config, error) {
	return p.RESTConfigAs(KWOKUser, pki.NodesGroup)
}
