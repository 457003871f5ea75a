package spec

import (
	"fmt"
	"os"
	"regexp"
	"strings"
	"testing"

	"golang.org/x/mod/semver"
)

// The binaries the toolchain builds are the versions the spec defaults to: the rehearsal and the
// image bake run what a default stack deploys.
func TestToolchainBuildsTheDefaultVersions(t *testing.T) {
	script, err := os.ReadFile("../../scripts/toolchain.sh")
	if err != nil {
		t.Fatal(err)
	}
	variable := func(name string) string {
		m := regexp.MustCompile(`(?m)^` + name + `=(\S+)$`).FindSubmatch(script)
		if m == nil {
			t.Fatalf("scripts/toolchain.sh sets no %s", name)
		}
		return string(m[1])
	}
	requires := func(wrapper, module, version string) {
		t.Helper()
		data, err := os.ReadFile("../../scripts/toolchain/" + wrapper + "/go.mod")
		if err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(string(data), "\t"+module+" "+version) && !strings.Contains(string(data), "require "+module+" "+version) {
			t.Errorf("scripts/toolchain/%s/go.mod does not require %s %s", wrapper, module, version)
		}
	}
	for name, want := range map[string]string{
		"KUBERNETES_VERSION": DefaultKubernetesVersion, "CONTAINERD_VERSION": DefaultContainerdVersion,
		"RUNC_VERSION": DefaultRuncVersion, "CRICTL_VERSION": DefaultCrictlVersion,
		"SCHEDULER_PLUGINS_VERSION": DefaultSchedulerPlugins, "PROMETHEUS_VERSION": DefaultPrometheusVersion,
		"NODE_EXPORTER_VERSION": DefaultNodeExporterVersion, "NODE_PROBLEM_DETECTOR_VERSION": DefaultNodeProblemDetector,
		"KUBERNETES_PREVIOUS": PreviousKubernetesVersion, "ETCD_PREVIOUS": PreviousEtcdVersion,
	} {
		if got := variable(name); got != want {
			t.Errorf("scripts/toolchain.sh %s=%s, the spec's default is %s", name, got, want)
		}
	}
	// Every version a stack may pin (Buildable) is one a wrapper module builds.
	wrappers := map[string]struct{ wrapper, module string }{
		"kubernetes": {"kubernetes", "k8s.io/kubernetes"}, "etcd": {"etcd", "go.etcd.io/etcd/server/v3"},
		"containerd": {"containerd", "github.com/containerd/containerd"}, "runc": {"runc", "github.com/opencontainers/runc"},
		"crictl": {"cri-tools", "sigs.k8s.io/cri-tools"}, "azureCNI": {"azure-cni", "github.com/Azure/azure-container-networking"},
		"schedulerPlugins": {"scheduler-plugins", "sigs.k8s.io/scheduler-plugins"}, "prometheus": {"prometheus", "github.com/prometheus/prometheus"},
		"coreDNS": {"coredns", "github.com/coredns/coredns"}, "nodeExporter": {"node-exporter", "github.com/prometheus/node_exporter"},
		"nodeProblemDetector": {"node-problem-detector", "k8s.io/node-problem-detector"},
	}
	for key, versions := range Buildable {
		w, ok := wrappers[key]
		if !ok {
			t.Errorf("Buildable[%s] names no wrapper module", key)
			continue
		}
		for i, v := range versions {
			if key == "prometheus" { // Prometheus vX.Y.Z is the Go module version v0.X0Y.Z
				var major, minor, patch int
				if _, err := fmt.Sscanf(v, "v%d.%d.%d", &major, &minor, &patch); err != nil {
					t.Fatal(err)
				}
				v = fmt.Sprintf("v0.%d%02d.%d", major, minor, patch)
			}
			wrapper := w.wrapper
			if i > 0 { // an older release has a wrapper of its own: kubernetes-v1.33
				wrapper += "-" + semver.MajorMinor(v)
			}
			requires(wrapper, w.module, v)
		}
	}
}

// Pulumi reads the stack files from Pulumi.yaml's stackConfigDir; clusterforge from StackDir.
func TestStackDirIsPulumis(t *testing.T) {
	project, err := os.ReadFile("../../Pulumi.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if !regexp.MustCompile(`(?m)^stackConfigDir: ` + StackDir + `$`).Match(project) {
		t.Errorf("Pulumi.yaml's stackConfigDir is not %q:\n%s", StackDir, project)
	}
}
