package spec

import (
	_ "embed"
	"fmt"
	"regexp"
	"strings"
	"time"

	"golang.org/x/mod/semver"
	"gopkg.in/yaml.v3"
)

//go:embed versions.yaml
var versionsFile []byte

// Support is what upstream says of one release line (v1.37, v3.6), read on SupportReadOn.
type Support struct {
	// EndOfSupport is the line's last day of upstream patches, YYYY-MM-DD; empty where upstream
	// publishes no date, and Policy says what it promises instead.
	EndOfSupport string   `yaml:"endOfSupport"`
	Policy       string   `yaml:"policy"`
	Floor        string   `yaml:"floor"`
	CVEs         []string `yaml:"cves"`
	Source       string   `yaml:"source"`
}

// End is EndOfSupport as a time; false when upstream publishes no date.
func (s Support) End() (time.Time, bool) {
	end, err := time.Parse(time.DateOnly, s.EndOfSupport)
	return end, err == nil
}

var versions = func() (file struct {
	Pins          map[string]string             `yaml:",inline"`
	SupportReadOn string                        `yaml:"supportReadOn"`
	Support       map[string]map[string]Support `yaml:"support"`
}) {
	if err := yaml.Unmarshal(versionsFile, &file); err != nil {
		panic(fmt.Sprintf("spec: versions.yaml: %v", err))
	}
	return file
}()

// Pinned is versions.yaml's pins: every pinned version by its key, once. The defaults below and
// the toolchain (scripts/toolchain.sh) read it.
var Pinned = versions.Pins

// SupportOf is the upstream support of release v of component, a key of versions.yaml's support
// (the stack's versions.* keys among them); false when versions.yaml knows nothing of its line.
func SupportOf(component, v string) (Support, bool) {
	s, ok := versions.Support[component][semver.MajorMinor(v)]
	return s, ok
}

// SupportReadOn is the day versions.yaml's support was read from upstream.
var SupportReadOn = versions.SupportReadOn

// pinned is one version of versions.yaml; a key it lacks is a bug of this package.
func pinned(key string) string {
	v, ok := Pinned[key]
	if !ok {
		panic("spec: versions.yaml has no " + key)
	}
	return v
}

// digestOf is the digest byDigest pins image at: byDigest must be image@sha256:<64 hex>, so a pin
// of image moved without its digest is a bug of versions.yaml that stops every program loading it.
func digestOf(image, byDigest string) string {
	digest, ok := strings.CutPrefix(byDigest, image+"@")
	if !ok || !regexp.MustCompile(`^sha256:[0-9a-f]{64}$`).MatchString(digest) {
		panic(fmt.Sprintf("spec: versions.yaml: pauseImageByDigest %q is not pauseImage %s@sha256:<64 hex>", byDigest, image))
	}
	return digest
}

// Defaults of the stack's versions section, and the releases before them, which the toolchain's
// upgrades group builds: a cluster may run them until a roll takes it to the pinned ones (the
// upgrade drills start there). etcd v3.7 joins and upgrades only from v3.6.11 or later
// (etcd.io/docs/v3.7/upgrades).
var (
	DefaultKubernetesVersion = pinned("kubernetes")
	DefaultEtcdVersion       = pinned("etcd")
	DefaultPauseImage        = pinned("pauseImage")
	// DefaultPauseImageDigest is DefaultPauseImage's index digest upstream.
	DefaultPauseImageDigest    = digestOf(DefaultPauseImage, pinned("pauseImageByDigest"))
	DefaultContainerdVersion   = pinned("containerd")
	DefaultRuncVersion         = pinned("runc")
	DefaultCrictlVersion       = pinned("crictl")
	DefaultAzureCNIVersion     = pinned("azureCNI")
	DefaultCoreDNSVersion      = pinned("coreDNS")
	DefaultAutoscalerVersion   = pinned("clusterAutoscaler")
	DefaultPrometheusVersion   = pinned("prometheus")
	DefaultNodeExporterVersion = pinned("nodeExporter")
	DefaultNodeProblemDetector = pinned("nodeProblemDetector")
	DefaultNvidiaDevicePlugin  = pinned("nvidiaDevicePlugin")
	PreviousKubernetesVersion  = pinned("previousKubernetes")
	PreviousEtcdVersion        = pinned("previousEtcd")
	// HopKubernetesVersion is the minor between an older cluster's and PreviousKubernetesVersion.
	HopKubernetesVersion = pinned("hopKubernetes")
	// ClusterforgeVersion tags clusterforge's own images, raised with each release.
	ClusterforgeVersion = pinned("clusterforge")
	// NvidiaContainerToolkitVersion is the toolkit GPU images install; their bake refuses another.
	NvidiaContainerToolkitVersion = pinned("nvidiaContainerToolkit")
)
