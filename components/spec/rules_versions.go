package spec

import (
	"fmt"
	"regexp"
	"slices"
	"strings"

	"golang.org/x/mod/semver"
)

// Buildable are the versions scripts/toolchain.sh builds, per versions.* key: the rehearsal and
// the image bake run exactly these, so a stack may pin no other (a test ties this table to the
// toolchain's wrapper modules). The add-on images CoreDNS, Prometheus, node_exporter and node-problem-detector are built
// from these sources too (images/cmd/mkimages); clusterAutoscaler's tag comes from its registry
// and need only be an exact release.
var Buildable = map[string][]string{
	"kubernetes":          {DefaultKubernetesVersion, PreviousKubernetesVersion, HopKubernetesVersion},
	"etcd":                {DefaultEtcdVersion, PreviousEtcdVersion},
	"containerd":          {DefaultContainerdVersion},
	"runc":                {DefaultRuncVersion},
	"crictl":              {DefaultCrictlVersion},
	"azureCNI":            {DefaultAzureCNIVersion},
	"prometheus":          {DefaultPrometheusVersion},
	"coreDNS":             {DefaultCoreDNSVersion},
	"nodeExporter":        {DefaultNodeExporterVersion},
	"nodeProblemDetector": {DefaultNodeProblemDetector},
}

// imageReference is the grammar of a pinned image reference, as containerd parses it
// (github.com/distribution/reference): a registry host, a path, and a tag, with an optional digest.
var imageReference = func() *regexp.Regexp {
	const (
		component = `[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*`
		host      = `(?:[a-zA-Z0-9](?:[a-zA-Z0-9-]*[a-zA-Z0-9])?)(?:\.[a-zA-Z0-9](?:[a-zA-Z0-9-]*[a-zA-Z0-9])?)*(?::[0-9]+)?`
		tag       = `[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}`
		digest    = `sha256:[0-9a-f]{64}`
	)
	return regexp.MustCompile(`^` + host + `/` + component + `(?:/` + component + `)*:` + tag + `(?:@` + digest + `)?$`)
}()

// KubeletSkewMinors is how many minors a kubelet may trail the apiservers by (Kubernetes'
// version-skew policy); it may never be newer.
const KubeletSkewMinors = 3

// WorkersHeld reports whether the stack holds its workers on an older kubelet minor than its
// control plane runs (versions.kubelet), as a cluster does on its way up several minors.
func (vs Versions) WorkersHeld() bool {
	return semver.Compare(semver.MajorMinor(vs.Kubelet), semver.MajorMinor(vs.Kubernetes)) < 0
}

// WorkerImage is what a worker image carries of vs, by versions.* key, kubelet first: while the
// workers are held these may stay what the workers run, which nothing here builds (their image is
// not baked again).
func (vs Versions) WorkerImage() [][2]string {
	return [][2]string{{"kubelet", vs.Kubelet}, {"containerd", vs.Containerd}, {"runc", vs.Runc}, {"crictl", vs.Crictl},
		{"azureCNI", vs.AzureCNI}, {"pauseImage", vs.PauseImage}}
}

// DefaultWorkerImage is a key of WorkerImage's default: the pinned release, the kubelet's that of
// versions.kubernetes.
func (vs Versions) DefaultWorkerImage(key string) string {
	if key == "kubelet" {
		return vs.Kubernetes
	}
	return Pinned[key]
}

// minorsBetween is how many minors b is ahead of a, within one major.
func minorsBetween(a, b string) int { return MinorOf(b) - MinorOf(a) }

// MinorOf is a release's minor number: 37 for v1.37.2.
func MinorOf(v string) int {
	var major, minor int
	fmt.Sscanf(semver.MajorMinor(v), "v%d.%d", &major, &minor)
	return minor
}

func (c *Cluster) validateVersions(v *validator) {
	vs := c.Versions
	held := vs.WorkersHeld()
	heldKeys := map[string]bool{}
	for _, kv := range vs.WorkerImage() {
		heldKeys[kv[0]] = held
	}
	for _, f := range []struct{ key, value string }{
		{"kubernetes", vs.Kubernetes}, {"kubelet", vs.Kubelet}, {"etcd", vs.Etcd}, {"containerd", vs.Containerd}, {"runc", vs.Runc},
		{"crictl", vs.Crictl}, {"azureCNI", vs.AzureCNI},
		{"coreDNS", vs.CoreDNS}, {"clusterAutoscaler", vs.ClusterAutoscaler}, {"prometheus", vs.Prometheus},
		{"nodeExporter", vs.NodeExporter}, {"nodeProblemDetector", vs.NodeProblemDetector},
		{"nvidiaDevicePlugin", vs.NvidiaDevicePlugin},
	} {
		field := "versions." + f.key
		heldWorker := heldKeys[f.key]
		buildable, pinned := Buildable[supportKey(f.key)]
		switch {
		case !exactRelease(f.value):
			v.fail(field, "write an exact release tag such as "+Pinned[supportKey(f.key)], "%s is not an exact release", Excerpt(f.value))
		case heldWorker && f.key != "kubelet" && semver.Compare(f.value, Pinned[f.key]) > 0:
			v.fail(field, "while versions.kubelet holds the workers, their image's versions are what they run: remove the line or set that",
				"%s is newer than the pinned %s", f.value, Pinned[f.key])
		case heldWorker:
			// What the held workers run: make plan warns of what upstream no longer patches.
		case pinned && !slices.Contains(buildable, f.value):
			v.fail(field, fmt.Sprintf("use %s, or pin the new release in components/spec/versions.yaml and its wrapper module under scripts/toolchain/ first", strings.Join(buildable, " or ")),
				"%s is not a version the toolchain builds", f.value)
		default:
			if s, known := SupportOf(supportKey(f.key), f.value); known && semver.Compare(f.value, s.Floor) < 0 {
				v.fail(field, fmt.Sprintf("use %s or later (%s)", s.Floor, strings.Join(s.CVEs, "; ")),
					"%s is below the oldest release of its line without a known escape or data-loss CVE", f.value)
			}
		}
	}
	if exactRelease(vs.Kubelet) && exactRelease(vs.Kubernetes) {
		switch {
		case semver.Compare(vs.Kubelet, vs.Kubernetes) > 0:
			v.fail("versions.kubelet", "a kubelet may not be newer than the apiservers: remove versions.kubelet or hold it at or below versions.kubernetes",
				"%s is newer than versions.kubernetes %s", vs.Kubelet, vs.Kubernetes)
		case semver.Major(vs.Kubelet) != semver.Major(vs.Kubernetes) || minorsBetween(vs.Kubelet, vs.Kubernetes) > KubeletSkewMinors:
			v.fail("versions.kubelet", fmt.Sprintf("roll the workers to within %d minors of versions.kubernetes first", KubeletSkewMinors),
				"%s trails versions.kubernetes %s by more than Kubernetes' version-skew policy allows", vs.Kubelet, vs.Kubernetes)
		}
	}
	if !ValidImageReference(vs.PauseImage) {
		v.fail("versions.pauseImage", "write a pinned reference with its registry and tag, e.g. "+DefaultPauseImage+" (L25)",
			"%s is not a pinned image reference", Excerpt(vs.PauseImage))
	}
}

// supportKey is the versions.yaml key whose releases a versions.* key takes: the kubelet is
// Kubernetes'.
func supportKey(key string) string {
	if key == "kubelet" {
		return "kubernetes"
	}
	return key
}

// ValidImageReference reports whether ref is a pinned image reference: registry, path and tag.
func ValidImageReference(ref string) bool { return len(ref) <= 255 && imageReference.MatchString(ref) }

// exactRelease is vMAJOR.MINOR.PATCH, without pre-release or build parts.
func exactRelease(v string) bool {
	return semver.IsValid(v) && semver.Canonical(v) == v && semver.Prerelease(v) == "" && strings.Count(v, ".") == 2
}
