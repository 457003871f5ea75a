package spec

import (
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	"golang.org/x/mod/semver"

	"github.com/clusterforge/clusterforge/test/docblock"
)

// versions.yaml is the one place a version is written: the toolchain reads it and builds exactly
// its releases (each wrapper module requires them), and every version the docs name is one of
// them, or one they name for another reason (notPinned).
func TestVersionsFile(t *testing.T) {
	script, err := os.ReadFile("../../scripts/toolchain.sh")
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(script), "\n") {
		if m := regexp.MustCompile(`^\s*([A-Z_]+)=v[0-9]`).FindStringSubmatch(line); m != nil {
			t.Errorf("scripts/toolchain.sh writes %s itself; read it from versions.yaml with pinned", m[1])
		}
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
	// Every version a stack may pin (Buildable) is one a wrapper module builds.
	wrappers := map[string]struct{ wrapper, module string }{
		"kubernetes": {"kubernetes", "k8s.io/kubernetes"}, "etcd": {"etcd", "go.etcd.io/etcd/server/v3"},
		"containerd": {"containerd", "github.com/containerd/containerd/v2"}, "runc": {"runc", "github.com/opencontainers/runc"},
		"crictl": {"cri-tools", "sigs.k8s.io/cri-tools"}, "azureCNI": {"azure-cni", "github.com/Azure/azure-container-networking"},
		"prometheus": {"prometheus", "github.com/prometheus/prometheus"},
		"coreDNS":    {"coredns", "github.com/coredns/coredns"}, "nodeExporter": {"node-exporter", "github.com/prometheus/node_exporter"},
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
			if i > 0 { // an older release has a wrapper of its own: kubernetes-v1.36
				wrapper += "-" + semver.MajorMinor(v)
			}
			requires(wrapper, w.module, v)
		}
	}
	// The toolchain's own tools.
	for key, w := range map[string]struct{ wrapper, module string }{
		"kubeBench": {"kube-bench", "github.com/aquasecurity/kube-bench"}, "kwok": {"kwok", "sigs.k8s.io/kwok"},
		"packer": {"packer", "github.com/hashicorp/packer"}, "packerPluginAzure": {"packer", "github.com/hashicorp/packer-plugin-azure"},
		"registry":               {"registry", "github.com/distribution/distribution/v3"},
		"nvidiaContainerToolkit": {"nvidia-container-toolkit", "github.com/NVIDIA/nvidia-container-toolkit"},
		"cniPlugins":             {"cni-plugins", "github.com/containernetworking/plugins"},
	} {
		requires(w.wrapper, w.module, pinned(key))
	}
	// The Pulumi engine: the CLI at the SDK release go.mod requires.
	requires("pulumi-language-go", "github.com/pulumi/pulumi/sdk/v3", pinned("pulumiLanguageGo"))
	requires("pulumi-kubernetes", "github.com/pulumi/pulumi-kubernetes/provider/v4", pinned("pulumiKubernetesSource"))
	root, err := os.ReadFile("../../go.mod")
	if err != nil {
		t.Fatal(err)
	}
	sdk := regexp.MustCompile(`\tgithub.com/pulumi/pulumi/sdk/v3 (v\S+)`).FindSubmatch(root)
	if sdk == nil {
		t.Fatal("go.mod requires no Pulumi SDK")
	}
	requires("pulumi", "github.com/pulumi/pulumi/pkg/v3", string(sdk[1]))
	requires("pulumi", "github.com/pulumi/pulumi/sdk/v3", string(sdk[1]))
	// The docs may name the SDKs go.mod pins: the CLI's release, the Kubernetes plugin's.
	goModPins := []string{string(sdk[1])}
	if k := regexp.MustCompile(`\tgithub.com/pulumi/pulumi-kubernetes/sdk/v4 (v\S+)`).FindSubmatch(root); k != nil {
		goModPins = append(goModPins, string(k[1]))
	}
	// The GPU bake installs the toolkit's Debian packages at the pinned release.
	worker, err := os.ReadFile("../../images/worker.pkr.hcl")
	if err != nil {
		t.Fatal(err)
	}
	toolkit := regexp.MustCompile(`(?s)variable "nvidia_container_toolkit_version" \{.*?default *= *"([^"]+)"`).FindSubmatch(worker)
	if toolkit == nil || "v"+string(toolkit[1]) != NvidiaContainerToolkitVersion {
		t.Errorf("images/worker.pkr.hcl's nvidia_container_toolkit_version is not %s", NvidiaContainerToolkitVersion)
	}
	// Both Azure bakes require the Azure plugin at the pinned release (HCL cannot read versions.yaml).
	for _, template := range []string{"worker.pkr.hcl", "control-plane.pkr.hcl"} {
		hcl, err := os.ReadFile("../../images/" + template)
		if err != nil {
			t.Fatal(err)
		}
		plugin := regexp.MustCompile(`(?s)azure = \{.*?version *= *"= ([^"]+)"`).FindSubmatch(hcl)
		if plugin == nil || "v"+string(plugin[1]) != pinned("packerPluginAzure") {
			t.Errorf("images/%s does not require the azure plugin at = %s", template, strings.TrimPrefix(pinned("packerPluginAzure"), "v"))
		}
	}
	pins := map[string]bool{}
	for _, v := range append(slices.Collect(maps.Values(Pinned)), goModPins...) {
		pins[v] = true
	}
	for _, lines := range versions.Support { // the floors are versions.yaml's too
		for _, s := range lines {
			pins[s.Floor] = true
		}
	}
	docs := []string{"../../README.md"}
	_ = filepath.WalkDir("../../docs", func(path string, d os.DirEntry, err error) error {
		if err == nil && strings.HasSuffix(path, ".md") {
			docs = append(docs, path)
		}
		return err
	})
	release := regexp.MustCompile(`\bv[0-9]+\.[0-9]+\.[0-9]+\b`)
	for _, doc := range docs {
		data, err := os.ReadFile(doc)
		if err != nil {
			t.Fatal(err)
		}
		for _, v := range release.FindAllString(string(data), -1) {
			if !pins[v] && notPinned[v] == "" {
				t.Errorf("%s names %s, which versions.yaml does not pin: name the pinned release, or say why in notPinned", doc, v)
			}
		}
	}
}

// notPinned are the releases the docs name that are no pin of ours, and why.
var notPinned = map[string]string{
	"v1.34.1": "the kube-proxy release whose nftables rule the booted workers found wrong (history)",
	// What a cluster built by clusterforge's previous pins runs: the upgrade runbook's start.
	"v1.34.2": "the Kubernetes of a cluster built by the previous pins", "v3.6.4": "the etcd of a cluster built by the previous pins",
	"v1.7.28": "the containerd of a cluster built by the previous pins", "v1.3.0": "the runc of a cluster built by the previous pins",
	"v1.34.0": "the crictl of a cluster built by the previous pins", "v1.6.21": "the Azure CNI of a cluster built by the previous pins",
	"v3.6.11": "the oldest etcd v3.7 upgrades from (etcd's upgrade rule)",
	"v0.12.3": "the Kueue release the fleet-operations design compares with",
	"v0.3.0":  "github.com/google/nftables, pinned by go.mod",
	"v4.24.0": "the pulumi-kubernetes release the provider's source follows (its SDK requirement)",
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

// supportOfPin is the support component a pin of versions.yaml belongs to; "" for the pins that
// run on no machine of the cluster, each with why.
func supportOfPin(key string) string {
	switch key {
	case "previousKubernetes", "hopKubernetes":
		return "kubernetes"
	case "previousEtcd":
		return "etcd"
	case "pauseImage", "pauseImageByDigest", "clusterforge", "pulumiLanguageGo", "pulumiKubernetesSource":
		// The pause image sleeps and reaps (upstream publishes no support for it), pinned by its
		// digest; clusterforge is ours; the Pulumi engine runs on the deploy host, at the releases
		// the proxy serves.
		return ""
	}
	return key
}

// pinProblems are the pins of versions.yaml that break their line's support on today: below the
// floor, past the end of support, or in a line it has no facts for; and facts that are malformed.
func pinProblems(pins map[string]string, support map[string]map[string]Support, today time.Time) []string {
	var problems []string
	for key, v := range pins {
		component := supportOfPin(key)
		if component == "" {
			continue
		}
		s, ok := support[component][semver.MajorMinor(v)]
		if !ok {
			problems = append(problems, fmt.Sprintf("%s %s: versions.yaml's support has no %s %s", key, v, component, semver.MajorMinor(v)))
			continue
		}
		if semver.Compare(v, s.Floor) < 0 {
			problems = append(problems, fmt.Sprintf("%s %s is below its floor %s (%s)", key, v, s.Floor, strings.Join(s.CVEs, "; ")))
		}
		if end, dated := s.End(); dated && today.After(end.AddDate(0, 0, 1)) {
			problems = append(problems, fmt.Sprintf("%s %s is past its end of support on %s", key, v, s.EndOfSupport))
		}
	}
	for component, lines := range support {
		for line, s := range lines {
			_, dated := s.End()
			switch {
			case !exactRelease(s.Floor) || semver.MajorMinor(s.Floor) != line:
				problems = append(problems, fmt.Sprintf("support of %s %s: floor %q is not a release of the line", component, line, s.Floor))
			case s.EndOfSupport != "" && !dated:
				problems = append(problems, fmt.Sprintf("support of %s %s: endOfSupport %q is not YYYY-MM-DD", component, line, s.EndOfSupport))
			case !dated && s.Policy == "":
				problems = append(problems, fmt.Sprintf("support of %s %s: no endOfSupport and no policy", component, line))
			case s.Source == "":
				problems = append(problems, fmt.Sprintf("support of %s %s: no source", component, line))
			}
		}
	}
	sort.Strings(problems)
	return problems
}

// Every pin is on a supported line, at or above the oldest release without a known escape or
// data-loss CVE; the check fails on a pin below its floor and on one past its end.
func TestPinsAreSupported(t *testing.T) {
	if _, err := time.Parse(time.DateOnly, SupportReadOn); err != nil {
		t.Errorf("versions.yaml's supportReadOn %q is not YYYY-MM-DD", SupportReadOn)
	}
	for _, p := range pinProblems(Pinned, versions.Support, time.Now()) {
		t.Error(p)
	}
	broken := map[string]map[string]Support{"runc": {"v1.3": {EndOfSupport: "2026-04-29", Floor: "v1.3.3",
		CVEs: []string{"CVE-2025-31133"}, Source: "fixture"}}}
	for _, tc := range []struct {
		name string
		pin  string
		day  string
		want string
	}{
		{"below its floor", "v1.3.0", "2026-01-01", "runc v1.3.0 is below its floor v1.3.3 (CVE-2025-31133)"},
		{"past its end", "v1.3.3", "2026-05-01", "runc v1.3.3 is past its end of support on 2026-04-29"},
		{"on its last day", "v1.3.3", "2026-04-29", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			day, _ := time.Parse(time.DateOnly, tc.day)
			got := strings.Join(pinProblems(map[string]string{"runc": tc.pin}, broken, day), "\n")
			if got != tc.want {
				t.Errorf("got %q, want %q", got, tc.want)
			}
		})
	}
}

// The support page's table is versions.yaml's support (`go test ./components/spec -run SupportPage
// -update` rewrites it).
func TestSupportPageShowsTheTable(t *testing.T) {
	var b strings.Builder
	fmt.Fprintf(&b, "Read from upstream on %s.\n\n| component | line | pinned | end of upstream support | floor | fixed below the floor | source |\n|---|---|---|---|---|---|---|\n", SupportReadOn)
	pinnedIn := map[string][]string{}
	for key, v := range Pinned {
		if c := supportOfPin(key); c != "" {
			pinnedIn[c+" "+semver.MajorMinor(v)] = append(pinnedIn[c+" "+semver.MajorMinor(v)], v)
		}
	}
	for _, component := range slices.Sorted(maps.Keys(versions.Support)) {
		lines := slices.Sorted(maps.Keys(versions.Support[component]))
		slices.SortFunc(lines, func(a, b string) int { return -semver.Compare(a, b) })
		for _, line := range lines {
			s := versions.Support[component][line]
			end := s.EndOfSupport
			if end == "" {
				end = "no date: " + s.Policy
			}
			pins := pinnedIn[component+" "+line]
			slices.SortFunc(pins, func(a, b string) int { return -semver.Compare(a, b) })
			cves := strings.Join(s.CVEs, "; ")
			if cves == "" {
				cves = "none known"
			}
			fmt.Fprintf(&b, "| %s | %s | %s | %s | %s | %s | %s |\n", component, line, strings.Join(pins, ", "), end, s.Floor, cves, s.Source)
		}
	}
	docblock.Check(t, "../../docs/reference/support.md", "support", b.String(), *update, "go test ./components/spec -run SupportPage -update")
}

// make plan's status of a stack whose workers are held on what an older cluster runs warns of
// each release past its support or unknown to versions.yaml, and of nothing else.
func TestSupportStatusWarnsOfHeldWorkers(t *testing.T) {
	c := &Cluster{Name: "cf-test", Pools: []Pool{{Name: "cpu", VMSize: "Standard_D16ds_v5", Nodes: 3}}}
	c.Versions.Kubelet, c.Versions.Containerd, c.Versions.Runc = "v1.34.2", "v1.7.28", "v1.5.0"
	c.Default()
	day, _ := time.Parse(time.DateOnly, SupportReadOn)
	var warned []string
	for _, s := range c.SupportStatus(day) {
		if s.Warn {
			warned = append(warned, s.Key+" "+s.Version+": "+s.Status)
		}
	}
	want := []string{"containerd v1.7.28: no support facts for its line in versions.yaml",
		"runc v1.5.0: below its line's floor v1.5.3: " + strings.Join(versions.Support["runc"]["v1.5"].CVEs, "; "),
		"kubelet v1.34.2: PAST its end of support on 2026-10-27"}
	if !slices.Equal(warned, want) {
		t.Errorf("warned of %q, want %q", warned, want)
	}
}

// What an earlier release applied is read back: a key it wrote that this one no longer reads is
// skipped, and the kubelet it had no key for ran the Kubernetes version. A stack file with that
// key is refused, naming it.
func TestEarlierRecordsAreRead(t *testing.T) {
	c := parseValid(t)
	c.Versions.Kubernetes, c.Versions.Kubelet = "v1.34.2", "v1.34.2"
	record, err := c.Resolved()
	if err != nil {
		t.Fatal(err)
	}
	earlier := strings.Replace(string(record), "    kubelet: v1.34.2\n", "    schedulerPlugins: v0.33.5\n", 1)
	if earlier == string(record) {
		t.Fatalf("the record has no versions.kubelet line to replace:\n%s", record)
	}
	applied, err := ParseResolved([]byte(earlier))
	if err != nil {
		t.Fatalf("an earlier release's record: %v", err)
	}
	if applied.Versions.Kubelet != "v1.34.2" {
		t.Errorf("an earlier record's kubelet reads %q, want the Kubernetes version it ran", applied.Versions.Kubelet)
	}
	stack := "config:\n  clusterforge:cluster:\n    name: cf-test\n    versions:\n      schedulerPlugins: v0.33.5\n"
	if _, err := ParseStackFile([]byte(stack)); err == nil || !strings.Contains(err.Error(), "versions.schedulerPlugins") || !strings.Contains(err.Error(), "no longer read") {
		t.Errorf("a stack file with versions.schedulerPlugins: %v, want it refused by name", err)
	}
}
