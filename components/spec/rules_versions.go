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
	"kubernetes":          {DefaultKubernetesVersion, PreviousKubernetesVersion},
	"etcd":                {DefaultEtcdVersion, PreviousEtcdVersion},
	"containerd":          {DefaultContainerdVersion},
	"runc":                {DefaultRuncVersion},
	"crictl":              {DefaultCrictlVersion},
	"azureCNI":            {DefaultAzureCNIVersion},
	"schedulerPlugins":    {DefaultSchedulerPlugins},
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

func (c *Cluster) validateVersions(v *validator) {
	vs := c.Versions
	for _, f := range []struct{ key, value string }{
		{"kubernetes", vs.Kubernetes}, {"etcd", vs.Etcd}, {"containerd", vs.Containerd}, {"runc", vs.Runc},
		{"crictl", vs.Crictl}, {"azureCNI", vs.AzureCNI}, {"schedulerPlugins", vs.SchedulerPlugins},
		{"coreDNS", vs.CoreDNS}, {"clusterAutoscaler", vs.ClusterAutoscaler}, {"prometheus", vs.Prometheus},
		{"nodeExporter", vs.NodeExporter}, {"nodeProblemDetector", vs.NodeProblemDetector},
		{"nvidiaDevicePlugin", vs.NvidiaDevicePlugin},
	} {
		field := "versions." + f.key
		switch buildable, pinned := Buildable[f.key]; {
		case !exactRelease(f.value):
			v.fail(field, "write an exact release tag such as v1.34.2", "%s is not an exact release", Excerpt(f.value))
		case pinned && !slices.Contains(buildable, f.value):
			v.fail(field, fmt.Sprintf("use %s, or pin the new release in components/spec/versions.yaml and its wrapper module under scripts/toolchain/ first", strings.Join(buildable, " or ")),
				"%s is not a version the toolchain builds", f.value)
		}
	}
	if !ValidImageReference(vs.PauseImage) {
		v.fail("versions.pauseImage", "write a pinned reference with its registry and tag, e.g. registry.k8s.io/pause:3.10.1 (L25)",
			"%s is not a pinned image reference", Excerpt(vs.PauseImage))
	}
}

// ValidImageReference reports whether ref is a pinned image reference: registry, path and tag.
func ValidImageReference(ref string) bool { return len(ref) <= 255 && imageReference.MatchString(ref) }

// exactRelease is vMAJOR.MINOR.PATCH, without pre-release or build parts.
func exactRelease(v string) bool {
	return semver.IsValid(v) && semver.Canonical(v) == v && semver.Prerelease(v) == "" && strings.Count(v, ".") == 2
}
