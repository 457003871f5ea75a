package spec

import (
	_ "embed"
	"fmt"

	"gopkg.in/yaml.v3"
)

//go:embed versions.yaml
var versionsFile []byte

// Pinned is versions.yaml: every pinned version by its key, once. The defaults below and the
// toolchain (scripts/toolchain.sh) read it.
var Pinned = func() map[string]string {
	out := map[string]string{}
	if err := yaml.Unmarshal(versionsFile, &out); err != nil {
		panic(fmt.Sprintf("spec: versions.yaml: %v", err))
	}
	return out
}()

// pinned is one version of versions.yaml; a key it lacks is a bug of this package.
func pinned(key string) string {
	v, ok := Pinned[key]
	if !ok {
		panic("spec: versions.yaml has no " + key)
	}
	return v
}

// Defaults of the stack's versions section, and the releases before them, which the toolchain's
// upgrades group builds: a cluster may run them until a roll takes it to the pinned ones (the
// upgrade drills start there). etcd v3.6 joins and upgrades only from v3.5.20 or later
// (etcd.io/docs/v3.6/upgrades).
var (
	DefaultKubernetesVersion   = pinned("kubernetes")
	DefaultEtcdVersion         = pinned("etcd")
	DefaultPauseImage          = pinned("pauseImage")
	DefaultContainerdVersion   = pinned("containerd")
	DefaultRuncVersion         = pinned("runc")
	DefaultCrictlVersion       = pinned("crictl")
	DefaultAzureCNIVersion     = pinned("azureCNI")
	DefaultSchedulerPlugins    = pinned("schedulerPlugins")
	DefaultCoreDNSVersion      = pinned("coreDNS")
	DefaultAutoscalerVersion   = pinned("clusterAutoscaler")
	DefaultPrometheusVersion   = pinned("prometheus")
	DefaultNodeExporterVersion = pinned("nodeExporter")
	DefaultNodeProblemDetector = pinned("nodeProblemDetector")
	DefaultNvidiaDevicePlugin  = pinned("nvidiaDevicePlugin")
	PreviousKubernetesVersion  = pinned("previousKubernetes")
	PreviousEtcdVersion        = pinned("previousEtcd")
	// ClusterforgeVersion tags clusterforge's own images, raised with each release.
	ClusterforgeVersion = pinned("clusterforge")
	// NvidiaContainerToolkitVersion is the toolkit GPU images install; their bake refuses another.
	NvidiaContainerToolkitVersion = pinned("nvidiaContainerToolkit")
)
