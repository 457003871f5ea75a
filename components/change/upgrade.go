package change

import (
	"fmt"
	"slices"
	"strings"

	"golang.org/x/mod/semver"

	"github.com/clusterforge/clusterforge/components/spec"
)

// Hop is one apply of a multi-minor upgrade: the stack's versions lines it sets or removes, and
// the roles its roll replaces.
type Hop struct {
	Set   []Line
	Roles []string
}

// Line is a versions.* line of the stack file: set to Value, or removed (Remove), the pin then
// returning to its default, Value.
type Line struct {
	Key, Value string
	Remove     bool
}

func (l Line) String() string {
	if l.Remove {
		return fmt.Sprintf("remove %s (its default %s)", l.Key, l.Value)
	}
	return l.Key + ": " + l.Value
}

func (h Hop) String() string {
	lines := make([]string, len(h.Set))
	for i, l := range h.Set {
		lines[i] = l.String()
	}
	return strings.Join(lines, ", ") + " (rolls " + strings.Join(h.Roles, ", ") + ")"
}

// etcdUpgradeFloor is the oldest release of the minor before each etcd minor that upgrades to
// it (etcd.io/docs/v3.7/upgrades/upgrade_3_7: every member at 3.6.11 or later first; 3.6 from
// 3.5.20).
var etcdUpgradeFloor = map[string]string{"v3.6": "v3.5.20", "v3.7": "v3.6.11"}

// skipsMinor reports whether to is more than one minor above from, within a major.
func skipsMinor(from, to string) bool {
	return semver.Major(from) == semver.Major(to) && spec.MinorOf(to)-spec.MinorOf(from) > 1
}

// UpgradePath is the applies that take a cluster running applied's versions to desired's one
// minor at a time. The control plane moves a minor a hop, with the workers held on what they run
// (versions.kubelet and the rest of spec.Versions.WorkerImage) and moved once at the end, or
// earlier only where they would otherwise trail by more than spec.KubeletSkewMinors; etcd moves a
// step a hop alongside it (the roll replaces the members first), each minor from a release its
// next one upgrades from. Each hop names releases the toolchain builds (spec.Buildable), the
// desired ones last. It is empty when a single apply suffices or desired is a downgrade (the
// rules refuse that), and an error names a minor nothing here builds.
func UpgradePath(applied, desired spec.Versions) ([]Hop, error) {
	if semver.Compare(desired.Kubernetes, applied.Kubernetes) < 0 || semver.Compare(desired.Etcd, applied.Etcd) < 0 {
		return nil, nil
	}
	var etcdSteps []string
	for etcd := applied.Etcd; etcd != desired.Etcd && needsEtcdHop(etcd, desired.Etcd); {
		next, err := hopRelease("etcd", nextEtcdStop(etcd, desired.Etcd), desired.Etcd)
		if err != nil {
			return nil, err
		}
		if semver.Compare(next, etcd) <= 0 {
			return nil, fmt.Errorf("etcd %s cannot reach %s: no release this clusterforge builds is a step up (it builds %s)",
				etcd, desired.Etcd, strings.Join(spec.Buildable["etcd"], ", "))
		}
		etcdSteps, etcd = append(etcdSteps, next), next
	}
	skips := skipsMinor(applied.Kubernetes, desired.Kubernetes)
	if len(etcdSteps) == 0 && !skips {
		return nil, nil // one apply takes the cluster there
	}
	etcdSteps = append(etcdSteps, desired.Etcd)
	kubeSteps := []string{desired.Kubernetes}
	if skips {
		kubeSteps = nil
		for m := spec.MinorOf(applied.Kubernetes) + 1; m <= spec.MinorOf(desired.Kubernetes); m++ {
			next, err := hopRelease("kubernetes", fmt.Sprintf("%s.%d", semver.Major(desired.Kubernetes), m), desired.Kubernetes)
			if err != nil {
				return nil, err
			}
			kubeSteps = append(kubeSteps, next)
		}
	}
	// The states the cluster passes through: etcd's steps alongside the control plane's, which
	// moves from the first hop when it skips minors and with etcd's last step when it does not;
	// the workers held on what they run until the last.
	offset := 0
	if !skips {
		offset = len(etcdSteps) - 1
	}
	cur, states := applied, []spec.Versions(nil)
	for i := range max(len(etcdSteps), len(kubeSteps)+offset) {
		next := cur
		if i < len(etcdSteps) {
			next.Etcd = etcdSteps[i]
		}
		if k := i - offset; k >= 0 && k < len(kubeSteps) {
			if spec.MinorOf(kubeSteps[k])-spec.MinorOf(cur.Kubelet) > spec.KubeletSkewMinors {
				// The workers would trail too far: they move to the control plane's release first,
				// on the worker image this clusterforge bakes, and stay held there.
				if !slices.Contains(spec.Buildable["kubernetes"], cur.Kubernetes) {
					return nil, fmt.Errorf("the kubelets %s would trail Kubernetes %s by more than %d minors, and this clusterforge does not build %s to move them to first: do that with an earlier release",
						cur.Kubelet, kubeSteps[k], spec.KubeletSkewMinors, cur.Kubernetes)
				}
				moved := withWorkers(cur, desired)
				moved.Kubelet = cur.Kubernetes
				states, cur = append(states, moved), moved
				next = withWorkers(next, moved)
			}
			next.Kubernetes = kubeSteps[k]
			if !skips {
				next = withWorkers(next, desired) // one minor: the kubelets follow in the same roll
			}
		}
		states, cur = append(states, next), next
	}
	if last := withWorkers(cur, desired); last != cur {
		states = append(states, last)
	}
	hops := make([]Hop, len(states))
	prev := applied
	for i, st := range states {
		hops[i] = hopTo(prev, st, desired, i == 0)
		prev = st
	}
	return hops, nil
}

// withWorkers is v with its workers on w's kubelet and image.
func withWorkers(v, w spec.Versions) spec.Versions {
	v.Kubelet, v.Containerd, v.Runc, v.Crictl, v.AzureCNI, v.PauseImage = w.Kubelet, w.Containerd, w.Runc, w.Crictl, w.AzureCNI, w.PauseImage
	return v
}

// lines are the versions lines of v that a path's hops write, by key, in order.
func lines(v spec.Versions) [][2]string {
	return append([][2]string{{"etcd", v.Etcd}, {"kubernetes", v.Kubernetes}}, v.WorkerImage()...)
}

// hopTo is the apply from state from to state to: every line where to is not yet desired pinned
// (all of them on the first hop, the changed ones after), and every line that reaches desired's
// value now written as desired has it, a default removed.
func hopTo(from, to, desired spec.Versions, first bool) Hop {
	var hop Hop
	was, want := lines(from), lines(desired)
	for i, kv := range lines(to) {
		key := "versions." + kv[0]
		switch {
		case kv[1] != want[i][1] && (first || kv[1] != was[i][1]):
			hop.Set = append(hop.Set, Line{Key: key, Value: kv[1]})
		case kv[1] == want[i][1] && kv[1] != was[i][1]:
			hop.Set = append(hop.Set, pin(key, kv[1], defaultOf(desired, kv[0]), true))
		}
	}
	if from.Etcd != to.Etcd {
		hop.Roles = append(hop.Roles, spec.RoleEtcdEvents, spec.RoleEtcdMain)
	}
	if from.Kubernetes != to.Kubernetes {
		hop.Roles = append(hop.Roles, spec.RoleAPIServer)
	}
	if withWorkers(from, to) != from {
		hop.Roles = append(hop.Roles, "workers")
	}
	return hop
}

// defaultOf is a versions key's default in a stack resolved to v.
func defaultOf(v spec.Versions, key string) string {
	switch key {
	case "etcd":
		return spec.DefaultEtcdVersion
	case "kubernetes":
		return spec.DefaultKubernetesVersion
	}
	return v.DefaultWorkerImage(key)
}

// pin is a versions line set to value, or removed when value is the last of its hops and the
// pin's default.
func pin(key, value, def string, last bool) Line {
	return Line{Key: key, Value: value, Remove: last && value == def}
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
	b.WriteString("apply these in turn, each with make diff, make roll (forge roll on Azure) and its checks before the next:")
	for i, h := range hops {
		fmt.Fprintf(&b, "\n           %d. %s", i+1, h)
	}
	return b.String()
}
