package change

import (
	"fmt"
	"regexp"
	"slices"
	"strings"

	"golang.org/x/mod/semver"

	"github.com/clusterforge/clusterforge/components/spec"
)

// A rule classifies the changes of the fields its pattern matches ("pools[*]" stands for any
// pool, ".*" for any map key). The first matching rule wins; TestEveryFieldHasARule keeps the
// table complete, TestRollsMatchRenderedMachines keeps it honest against the machine renderer.
type rule struct {
	pattern string
	class   Class
	// roles are the roles a Roll replaces; "workers" stands for every pool's, "pool" for the
	// changed pool's.
	roles  []string
	reason string
	// check may refuse a change the class allows (a version skip, a removed pool in use).
	check func(ch *Change, applied, desired *spec.Cluster) string
}

const rollEtcd = "each member replaced in turn on an empty local disk, followers first, the leader last"

var rules = []rule{
	{pattern: "name", class: Refused, reason: "the name prefixes every Azure resource: a new name is a new cluster; create a new stack"},
	{pattern: "location", class: Refused, reason: "a new region is a new cluster; create a new stack"},
	{pattern: "zones", class: Refused, reason: "VMs are placed in zones when created; moving them replaces every etcd member at once"},
	{pattern: "targetNodes", class: InPlace, reason: "sizes are frozen in the stack file (make freeze); a new target changes only what the lines below show"},
	{pattern: "versions.kubernetes", class: Roll, roles: []string{spec.RoleAPIServer}, check: kubernetesSkew,
		reason: "apiservers one at a time, before any kubelet of the new release (versions.kubelet follows it unless held)"},
	{pattern: "versions.kubelet", class: Roll, roles: []string{"workers"}, check: kubeletChange,
		reason: "the kubelets, after the apiservers and never newer than them: the workers' image carries them"},
	{pattern: "versions.etcd", class: Roll, roles: []string{spec.RoleEtcdEvents, spec.RoleEtcdMain}, check: etcdUpgradePath,
		reason: "events etcd first as the canary, then the main etcd; " + rollEtcd},
	{pattern: "versions.pauseImage", class: Roll, roles: []string{"workers"}, check: heldWorkerImage, reason: "the pause image is preloaded in the worker image and pinned in its containerd config (L25)"},
	{pattern: "versions.containerd", class: Roll, roles: []string{"workers"}, check: heldWorkerImage, reason: "baked into the worker image: bake one with the new version and roll the pools"},
	{pattern: "versions.runc", class: Roll, roles: []string{"workers"}, check: heldWorkerImage, reason: "baked into the worker image"},
	{pattern: "versions.crictl", class: Roll, roles: []string{"workers"}, check: heldWorkerImage, reason: "baked into the worker image"},
	{pattern: "versions.azureCNI", class: Roll, roles: []string{"workers"}, check: heldWorkerImage, reason: "baked into the worker image (L29)"},
	{pattern: "versions.*", class: InPlace, reason: "an add-on image: its Deployment or DaemonSet rolls its own pods"},
	{pattern: "controlPlaneImage", class: Roll, roles: []string{spec.RoleEtcdEvents, spec.RoleEtcdMain, spec.RoleAPIServer},
		reason: "every control-plane machine boots it: " + rollEtcd + "; apiservers one at a time"},
	{pattern: "image", class: InPlace, reason: "the default of CPU pools: each pool's own image line says what rolls"},
	{pattern: "gpuImage", class: InPlace, reason: "the default of GPU pools: each pool's own image line says what rolls"},
	{pattern: "admin.*", class: Refused, reason: "Azure cannot change a VM's OS profile after it is created; use the hub's break-glass path or a new cluster"},
	{pattern: "network.hub.*", class: InPlace, reason: "the peering and the security rules that admit the hub are updated in place"},
	{pattern: "network.*", class: Refused, reason: "Azure refuses to move a subnet in use, and certificates and Services carry these addresses; a new address plan is a new cluster"},
	{pattern: "etcdMain.members", class: Refused, reason: "changing etcd membership is not rolled yet: keep the member count, or build a new cluster and restore a snapshot into it"},
	{pattern: "etcdEvents.members", class: Refused, reason: "changing etcd membership is not rolled yet: keep the member count"},
	{pattern: "etcdMain.*", class: Roll, roles: []string{spec.RoleEtcdMain}, reason: rollEtcd},
	{pattern: "etcdEvents.*", class: Roll, roles: []string{spec.RoleEtcdEvents}, reason: rollEtcd},
	{pattern: "backup.*", class: Roll, roles: []string{spec.RoleEtcdMain}, reason: "the backup agent's flags live on the main etcd members: " + rollEtcd},
	{pattern: "apiServer.count", class: InPlace, reason: "the apiserver scale set's capacity; new instances join the load balancer when ready"},
	{pattern: "apiServer.*", class: Roll, roles: []string{spec.RoleAPIServer}, reason: "apiservers one at a time, each out of the load balancer first"},
	{pattern: "kubelet.*", class: Roll, roles: []string{"workers"}, reason: "kubelet and containerd settings are written at boot: pools in batches, a canary first, drained"},
	{pattern: "dns.*", class: InPlace, reason: "CoreDNS's Deployment"},
	{pattern: "autoscaler.*", class: InPlace, reason: "cluster-autoscaler's Deployment"},
	{pattern: "teams.*", class: InPlace, reason: "clusterforge-ops's Deployment: the quota it keeps in every team namespace"},
	{pattern: "joins.step", class: InPlace, reason: "cluster-autoscaler's --max-nodes-per-scaleup and forge grow's increment"},
	{pattern: "joins.pause", class: InPlace, reason: "read by forge grow when it runs"},
	{pattern: "joins.jitter", class: Roll, roles: []string{"workers"}, reason: "the kubelet's start delay is written at boot: pools in batches, a canary first, drained"},
	{pattern: "pools[*]", class: Roll, roles: []string{spec.RoleAPIServer}, check: poolRemoval,
		reason: "a new pool is new scale sets in new worker VNets; the CSR approver on the apiservers learns their addresses"},
	{pattern: "pools[*].name", class: InPlace, reason: "pools are matched by name"},
	{pattern: "pools[*].nodes", class: InPlace, reason: "only a new scale set is created with it; afterwards the autoscaler owns the count (L19)"},
	{pattern: "pools[*].maxNodes", class: InPlace, reason: "the autoscaler's bound; a pool past one scale set's limit gains scale sets"},
	{pattern: "pools[*].vnets", class: Roll, roles: []string{spec.RoleAPIServer}, check: vnetsAppended,
		reason: "a grown pool's new scale sets live in new worker VNets, peered with the others; the CSR approver on the apiservers learns their addresses"},
	{pattern: "pools[*].maxPods", class: Roll, roles: []string{"pool"}, check: scaleSetsStay,
		reason: "the kubelet's pod limit and the NICs' IP configurations: instances are replaced in batches, a canary first, drained"},
	{pattern: "pools[*].vmSize", class: Roll, roles: []string{"pool"}, check: placementGroup,
		reason: "the scale set's model changes; instances are replaced in batches, a canary first, drained"},
	{pattern: "pools[*].*", class: Roll, roles: []string{"pool"}, reason: "written at boot: instances are replaced in batches, a canary first, drained"},
}

// compiled are the rules' patterns as regular expressions, built once.
var compiled = func() []*regexp.Regexp {
	out := make([]*regexp.Regexp, len(rules))
	for i, r := range rules {
		p := regexp.QuoteMeta(r.pattern)
		p = strings.ReplaceAll(p, `\[\*\]`, `\[[^\]]+\]`)
		p = strings.ReplaceAll(p, `\.\*`, `\..+`)
		out[i] = regexp.MustCompile("^" + p + "$")
	}
	return out
}()

// ruleFor is the first rule whose pattern matches path.
func ruleFor(path string) (rule, bool) {
	for i, re := range compiled {
		if re.MatchString(path) {
			return rules[i], true
		}
	}
	return rule{}, false
}

func classify(ch *Change, applied, desired *spec.Cluster) {
	r, ok := ruleFor(ch.Field)
	if !ok {
		ch.Class, ch.Reason = Refused, "clusterforge has no rule for this field; it refuses what it cannot classify"
		return
	}
	ch.Class, ch.Reason = r.class, r.reason
	for _, role := range r.roles {
		switch role {
		case "workers":
			for _, p := range desired.Pools {
				ch.Roles = append(ch.Roles, spec.WorkerRole(p.Name))
			}
		case "pool":
			ch.Roles = append(ch.Roles, spec.WorkerRole(poolName(ch.Field)))
		default:
			ch.Roles = append(ch.Roles, role)
		}
	}
	if r.check != nil {
		if why := r.check(ch, applied, desired); why != "" {
			ch.Class, ch.Reason, ch.Roles = Refused, why, nil
		}
	}
}

// poolName is the pool a "pools[<name>]..." path addresses.
func poolName(path string) string {
	name, _, _ := strings.Cut(strings.TrimPrefix(path, "pools["), "]")
	return name
}

// kubernetesSkew allows one minor up, or any patch within a minor; kube-apiserver supports
// neither skipping a minor nor a downgrade (kubernetes.io/releases/version-skew-policy). A skip is
// refused with the hops that get there (UpgradePath).
func kubernetesSkew(ch *Change, applied, desired *spec.Cluster) string {
	if why := minorStep(ch.From, ch.To, "Kubernetes", "apiservers"); why != "" {
		return withPath(why, applied, desired)
	}
	return ""
}

// kubeletChange refuses a kubelet downgrade; a kubelet may move several minors at once, up to the
// control plane's (spec validation keeps it within the skew policy).
func kubeletChange(ch *Change, _, _ *spec.Cluster) string {
	if semver.Compare(ch.To, ch.From) < 0 {
		return fmt.Sprintf("the kubelet %s is older than the %s the workers run: downgrades are not supported", ch.To, ch.From)
	}
	return ""
}

// heldWorkerImage refuses a change to the worker image while the workers are held: a held worker
// runs the image it has (versions.kubelet moves them, and their image with them).
func heldWorkerImage(ch *Change, _, desired *spec.Cluster) string {
	if desired.Versions.WorkersHeld() {
		return fmt.Sprintf("versions.kubelet %s holds the workers on the image they run: keep %s at %s until the kubelet moves", desired.Versions.Kubelet, ch.Field, ch.From)
	}
	return ""
}

// etcdUpgradePath allows patch changes and one minor up from a release that minor accepts: etcd
// upgrades one minor at a time, and a downgrade needs `etcdctl downgrade` first
// (etcd.io/docs/v3.7/upgrades).
func etcdUpgradePath(ch *Change, applied, desired *spec.Cluster) string {
	why := minorStep(ch.From, ch.To, "etcd", "members")
	if floor, ok := etcdUpgradeFloor[semver.MajorMinor(ch.To)]; why == "" && ok && semver.MajorMinor(ch.From) != semver.MajorMinor(ch.To) && semver.Compare(ch.From, floor) < 0 {
		why = fmt.Sprintf("etcd %s upgrades only from %s or later", semver.MajorMinor(ch.To), floor)
	}
	if why != "" && skipsMinor(applied.Versions.Kubernetes, desired.Versions.Kubernetes) {
		return why + "; see the hops of versions.kubernetes"
	}
	if why != "" {
		return withPath(why, applied, desired)
	}
	return ""
}

// withPath adds the hops that reach desired to a refusal, where there are some.
func withPath(why string, applied, desired *spec.Cluster) string {
	hops, err := UpgradePath(applied.Versions, desired.Versions)
	switch {
	case err != nil:
		return why + ": " + err.Error()
	case len(hops) > 0:
		return why + "; " + UpgradePathText(hops)
	}
	return why
}

func minorStep(from, to, what, who string) string {
	fromMinor, toMinor := semver.MajorMinor(from), semver.MajorMinor(to)
	switch {
	case semver.Major(from) != semver.Major(to):
		return fmt.Sprintf("a major %s change is not a roll", what)
	case semver.Compare(fromMinor, toMinor) > 0:
		return fmt.Sprintf("%s %s is older than the %s run (%s): downgrades are not supported; restore the last snapshot into a cluster of the old version instead", what, to, who, from)
	case semver.Compare(fromMinor, toMinor) < 0 && spec.MinorOf(to) != spec.MinorOf(from)+1:
		return fmt.Sprintf("%s upgrades one minor at a time", what)
	}
	return ""
}

// poolRemoval refuses removing a pool that may still hold machines: its workloads would go with
// the scale set.
func poolRemoval(ch *Change, applied, _ *spec.Cluster) string {
	if ch.To != "" {
		return ""
	}
	for _, p := range applied.Pools {
		if p.Name == poolName(ch.Field) && p.MaxNodes > 0 {
			return "removing a pool deletes its scale sets with whatever runs there: set its maxNodes and nodes to 0, apply, then remove it"
		}
	}
	return ""
}

// vnetsAppended refuses a change to a pool's worker VNets other than new ones at the end: a VNet
// in use holds its scale sets' NICs, and no address of a running cluster moves.
func vnetsAppended(ch *Change, applied, desired *spec.Cluster) string {
	from, _ := applied.PoolOfRole(spec.WorkerRole(poolName(ch.Field)))
	to, _ := desired.PoolOfRole(spec.WorkerRole(poolName(ch.Field)))
	if len(to.VNets) < len(from.VNets) || !slices.Equal(from.VNets, to.VNets[:len(from.VNets)]) {
		return "a worker VNet in use cannot move or go: keep the pool's VNets and add new ones at the end (make freeze does)"
	}
	return ""
}

// scaleSetsStay refuses a pods-per-node change that would split the pool's scale sets or share
// its VNets differently: each scale set stays in the VNet it was created in.
func scaleSetsStay(ch *Change, applied, desired *spec.Cluster) string {
	from, _ := applied.PoolOfRole(spec.WorkerRole(poolName(ch.Field)))
	to, _ := desired.PoolOfRole(spec.WorkerRole(poolName(ch.Field)))
	if from.ScaleSetLimit() != to.ScaleSetLimit() || from.ScaleSetsPerVNet() != to.ScaleSetsPerVNet() {
		return fmt.Sprintf("%d pods a node changes how the pool's scale sets fill its VNets (%d a VNet, not %d): add a new pool with it, move the work, then scale this one to 0",
			to.MaxPods, to.ScaleSetsPerVNet(), from.ScaleSetsPerVNet())
	}
	return ""
}

// placementGroup refuses a size change that moves a pool in or out of InfiniBand's single
// placement group: Azure cannot change singlePlacementGroup from false to true, and the scale
// set split differs.
func placementGroup(ch *Change, _, _ *spec.Cluster) string {
	from, _ := spec.VMCapacity(ch.From)
	to, _ := spec.VMCapacity(ch.To)
	if from.InfiniBand != to.InfiniBand {
		return "the new size changes the pool's placement group (InfiniBand): add a new pool with it, move the work, then scale the old pool to 0"
	}
	return ""
}
