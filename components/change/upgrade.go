package change

import (
	"fmt"
	"slices"
	"strings"

	"golang.org/x/mod/semver"

	"github.com/clusterforge/clusterforge/components/spec"
)

// Hop is one apply of a multi-minor upgrade: the stack's versions lines it sets (a value of ""
// removes the line, the pin returning to its default) and the roles its roll replaces.
type Hop struct {
	Set   [][2]string
	Roles []string
}

func (h Hop) String() string {
	var lines []string
	for _, kv := range h.Set {
		if kv[1] == "" {
			lines = append(lines, "remove "+kv[0])
		} else {
			lines = append(lines, kv[0]+": "+kv[1])
		}
	}
	return strings.Join(lines, ", ") + " (rolls " + strings.Join(h.Roles, ", ") + ")"
}

// etcdUpgradeFloor is the oldest release of the minor before each etcd minor that upgrades to
// it (etcd.io/docs/v3.7/upgrades/upgrade_3_7: every member at 3.6.11 or later first).
var etcdUpgradeFloor = map[string]string{"v3.7": "v3.6.11"}

// UpgradePath is the applies that take a cluster running applied's versions to desired's one
// minor at a time. The control plane moves a minor a hop, with the workers held on their kubelet
// and image (versions.kubelet and the image's versions) and rolled once at the end, or earlier
// only where they would otherwise trail by more than spec.KubeletSkewMinors; etcd moves a step a
// hop alongside it (the roll replaces the members first), each minor from a release its next one
// upgrades from. Each hop names releases the toolchain builds (spec.Buildable), the desired ones
// last, so every stack on the way validates. It is empty when a single apply suffices, and an
// error names a minor nothing here builds.
func UpgradePath(applied, desired spec.Versions) ([]Hop, error) {
	var etcdSteps []string
	for etcd := applied.Etcd; etcd != desired.Etcd && needsEtcdHop(etcd, desired.Etcd); {
		next, err := hopRelease("etcd", nextEtcdStop(etcd, desired.Etcd), desired.Etcd)
		if err != nil {
			return nil, err
		}
		etcdSteps, etcd = append(etcdSteps, next), next
	}
	var kubeSteps []string
	skips := semver.Major(applied.Kubernetes) == semver.Major(desired.Kubernetes) && spec.MinorOf(desired.Kubernetes)-spec.MinorOf(applied.Kubernetes) > 1
	if skips {
		for m := spec.MinorOf(applied.Kubernetes) + 1; m <= spec.MinorOf(desired.Kubernetes); m++ {
			next, err := hopRelease("kubernetes", fmt.Sprintf("%s.%d", semver.Major(desired.Kubernetes), m), desired.Kubernetes)
			if err != nil {
				return nil, err
			}
			kubeSteps = append(kubeSteps, next)
		}
	}
	if len(etcdSteps) == 0 && !skips {
		return nil, nil // one apply takes the cluster there
	}
	etcdSteps = append(etcdSteps, desired.Etcd)
	etcdRoles := []string{spec.RoleEtcdEvents, spec.RoleEtcdMain}
	var hops []Hop
	if !skips {
		// etcd's steps, the control plane held where it runs until the last.
		for i, e := range etcdSteps {
			hop := Hop{Set: [][2]string{{"versions.etcd", e}, {"versions.kubernetes", applied.Kubernetes}}, Roles: etcdRoles}
			if i == len(etcdSteps)-1 && desired.Kubernetes != applied.Kubernetes {
				hop.Set[1][1], hop.Roles = desired.Kubernetes, append(etcdRoles, spec.RoleAPIServer)
			}
			if i == len(etcdSteps)-1 && desired.Kubelet != applied.Kubelet {
				hop.Roles = append(hop.Roles, "workers")
			}
			hops = append(hops, hop)
		}
		return hops, nil
	}
	controlPlane, kubelet := applied.Kubernetes, applied.Kubelet
	for i := range max(len(etcdSteps), len(kubeSteps)) {
		var hop Hop
		if i < len(etcdSteps) && etcdSteps[i] != applied.Etcd {
			hop.Set, hop.Roles = [][2]string{{"versions.etcd", etcdSteps[i]}}, etcdRoles
		}
		if i < len(kubeSteps) {
			next := kubeSteps[i]
			if spec.MinorOf(next)-spec.MinorOf(kubelet) > spec.KubeletSkewMinors {
				// The workers would trail too far: they move to the control plane's release first.
				hops = append(hops, Hop{Set: workerLines(controlPlane), Roles: []string{"workers"}})
				kubelet = controlPlane
			}
			hop.Set, hop.Roles = append(hop.Set, [2]string{"versions.kubernetes", next}), append(hop.Roles, spec.RoleAPIServer)
			controlPlane = next
		}
		if i == 0 {
			hop.Set = append(hop.Set, heldWorkerLines(applied)...) // held until the last hop
		}
		hops = append(hops, hop)
	}
	final := Hop{Roles: []string{"workers"}}
	for _, kv := range heldWorkerLines(desired) {
		final.Set = append(final.Set, [2]string{kv[0], ""})
	}
	return append(hops, final), nil
}

// heldWorkerLines pin the workers on what they run: the kubelet and the worker image's versions.
func heldWorkerLines(v spec.Versions) [][2]string {
	return [][2]string{{"versions.kubelet", v.Kubelet}, {"versions.containerd", v.Containerd}, {"versions.runc", v.Runc},
		{"versions.crictl", v.Crictl}, {"versions.azureCNI", v.AzureCNI}}
}

// workerLines move held workers to a kubelet of release k, on the worker image the toolchain
// bakes now.
func workerLines(k string) [][2]string {
	lines := [][2]string{{"versions.kubelet", k}}
	for _, kv := range heldWorkerLines(spec.Versions{})[1:] {
		lines = append(lines, [2]string{kv[0], ""})
	}
	return lines
}

// needsEtcdHop: etcd upgrades one minor at a time, each from a release its next one accepts.
func needsEtcdHop(from, to string) bool {
	if spec.MinorOf(to)-spec.MinorOf(from) > 1 {
		return true
	}
	floor, ok := etcdUpgradeFloor[semver.MajorMinor(to)]
	return ok && semver.MajorMinor(from) != semver.MajorMinor(to) && semver.Compare(from, floor) < 0
}

// nextEtcdStop is the minor an etcd hop from `from` towards `to` lands in: its own (to a release
// the next minor upgrades from) or the next one.
func nextEtcdStop(from, to string) string {
	next := fmt.Sprintf("%s.%d", semver.Major(from), spec.MinorOf(from)+1)
	if floor, ok := etcdUpgradeFloor[next]; ok && semver.Compare(from, floor) < 0 {
		return semver.MajorMinor(from)
	}
	return next
}

// hopRelease is the release of minor that a hop lands on: desired within its own minor, else the
// newest of that minor the toolchain builds.
func hopRelease(key, minor, desired string) (string, error) {
	if semver.MajorMinor(desired) == minor {
		return desired, nil
	}
	var in []string
	for _, v := range spec.Buildable[key] {
		if semver.MajorMinor(v) == minor {
			in = append(in, v)
		}
	}
	if len(in) == 0 {
		return "", fmt.Errorf("no %s %s release is built by this clusterforge (it builds %s): reach %s with an earlier release of clusterforge first",
			key, minor, strings.Join(spec.Buildable[key], ", "), minor)
	}
	slices.SortFunc(in, semver.Compare)
	return in[len(in)-1], nil
}

// UpgradePathText is the refusal's advice: the hops, numbered, to apply in turn.
func UpgradePathText(hops []Hop) string {
	var b strings.Builder
	b.WriteString("apply these in turn, each with make diff, make roll (pulumi up on Azure) and its checks before the next:")
	for i, h := range hops {
		fmt.Fprintf(&b, "\n           %d. %s", i+1, h)
	}
	return b.String()
}
