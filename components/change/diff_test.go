package change

import (
	"fmt"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/clusterforge/clusterforge/components/machine"
	"github.com/clusterforge/clusterforge/components/pki"
	"github.com/clusterforge/clusterforge/components/spec"
)

// applied is the dev stack as it would have been applied, with a label and a taint so every
// kind of field exists.
func applied(t *testing.T) *spec.Cluster {
	t.Helper()
	c, err := spec.LoadStack(filepath.Join("..", "..", spec.StackDir, "Pulumi.dev.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	c.Pools[0].Labels = map[string]string{"team": "research"}
	c.Pools[0].Taints = []spec.Taint{{Key: "dedicated", Value: "research", Effect: "NoSchedule"}}
	// On the releases before the pinned ones, so that the pinned ones are an upgrade.
	c.Versions.Kubernetes, c.Versions.Kubelet, c.Versions.Etcd = spec.PreviousKubernetesVersion, spec.PreviousKubernetesVersion, spec.PreviousEtcdVersion
	return copyOf(t, c)
}

// nextPatch is the release after v within its minor.
func nextPatch(v string) string {
	var major, minor, patch int
	fmt.Sscanf(v, "v%d.%d.%d", &major, &minor, &patch)
	return fmt.Sprintf("v%d.%d.%d", major, minor, patch+1)
}

// copyOf is a deep copy through the applied record's encoding.
func copyOf(t *testing.T, c *spec.Cluster) *spec.Cluster {
	t.Helper()
	out, err := c.Clone()
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func TestResolvedRoundTrips(t *testing.T) {
	c := applied(t)
	if changes := Diff(c, copyOf(t, c)); len(changes) > 0 {
		t.Fatalf("a spec read back from its record differs from itself: %v", changes)
	}
}

// Every field of the spec, a label and a pool's presence included, has a rule of its own: the
// fallback refusal is for fields added without one.
func TestEveryFieldHasARule(t *testing.T) {
	for path := range leaves(applied(t)) {
		if _, ok := ruleFor(path); !ok {
			t.Errorf("no rule classifies %s: add one to rules", path)
		}
	}
}

// edits are single-field changes and what they must be classed as.
var edits = []struct {
	name  string
	edit  func(c *spec.Cluster)
	class Class
	roles []string
}{
	{"kubernetes patch", func(c *spec.Cluster) {
		c.Versions.Kubernetes = nextPatch(spec.PreviousKubernetesVersion)
		c.Versions.Kubelet = c.Versions.Kubernetes
	}, Roll, []string{"apiserver", "worker-cpu", "worker-gpu", "worker-cpu2"}},
	{"kubernetes minor", func(c *spec.Cluster) {
		c.Versions.Kubernetes, c.Versions.Kubelet = spec.DefaultKubernetesVersion, spec.DefaultKubernetesVersion
	},
		Roll, []string{"apiserver", "worker-cpu", "worker-gpu", "worker-cpu2"}},
	{"kubernetes minor, workers held", func(c *spec.Cluster) { c.Versions.Kubernetes = spec.DefaultKubernetesVersion }, Roll, []string{"apiserver"}},
	{"kubelet", func(c *spec.Cluster) { c.Versions.Kubelet = nextPatch(spec.PreviousKubernetesVersion) }, Roll, []string{"worker-cpu", "worker-gpu", "worker-cpu2"}},
	{"kubelet downgrade", func(c *spec.Cluster) { c.Versions.Kubelet = spec.HopKubernetesVersion }, Refused, nil},
	{"kubernetes two minors", func(c *spec.Cluster) { c.Versions.Kubernetes, c.Versions.Kubelet = "v1.38.0", "v1.38.0" }, Refused, nil},
	{"kubernetes downgrade", func(c *spec.Cluster) { c.Versions.Kubernetes = spec.HopKubernetesVersion }, Refused, nil},
	{"etcd patch", func(c *spec.Cluster) { c.Versions.Etcd = nextPatch(spec.PreviousEtcdVersion) }, Roll, []string{"etcd-events", "etcd-main"}},
	{"etcd minor", func(c *spec.Cluster) { c.Versions.Etcd = spec.DefaultEtcdVersion }, Roll, []string{"etcd-events", "etcd-main"}},
	{"etcd downgrade", func(c *spec.Cluster) { c.Versions.Etcd = "v3.5.21" }, Refused, nil},
	{"etcd size", func(c *spec.Cluster) { c.EtcdMain.VMSize = "Standard_E8ds_v5" }, Roll, []string{"etcd-main"}},
	{"etcd quota", func(c *spec.Cluster) { c.EtcdMain.QuotaBackendBytes *= 2 }, Roll, []string{"etcd-main"}},
	{"events quota", func(c *spec.Cluster) { c.EtcdEvents.QuotaBackendBytes *= 2 }, Roll, []string{"etcd-events"}},
	{"etcd members", func(c *spec.Cluster) { c.EtcdMain.Members = 3 }, Refused, nil},
	{"backup interval", func(c *spec.Cluster) { c.Backup.Interval = "5m" }, Roll, []string{"etcd-main"}},
	{"control-plane image", func(c *spec.Cluster) { c.ControlPlaneImage += "1" }, Roll, []string{"etcd-events", "etcd-main", "apiserver"}},
	{"apiserver inflight", func(c *spec.Cluster) { c.APIServer.MaxRequestsInflight++ }, Roll, []string{"apiserver"}},
	{"apiserver count", func(c *spec.Cluster) { c.APIServer.Count++ }, InPlace, nil},
	{"max pods", func(c *spec.Cluster) { // every pool's default; 31 keeps two scale sets a VNet
		c.Kubelet.MaxPods = 31
		for i := range c.Pools {
			c.Pools[i].MaxPods = 31
		}
	}, Roll, []string{"worker-cpu", "worker-gpu", "worker-cpu2"}},
	{"pause image", func(c *spec.Cluster) { c.Versions.PauseImage = "registry.k8s.io/pause:3.10.1" }, Roll, []string{"worker-cpu", "worker-gpu", "worker-cpu2"}},
	{"pool label", func(c *spec.Cluster) { c.Pools[0].Labels["team"] = "infra" }, Roll, []string{"worker-cpu"}},
	{"pool taint", func(c *spec.Cluster) { c.Pools[0].Taints = nil }, Roll, []string{"worker-cpu"}},
	{"pool image", func(c *spec.Cluster) { c.Pools[1].Image += "1" }, Roll, []string{"worker-gpu"}},
	{"pool size", func(c *spec.Cluster) { c.Pools[0].VMSize = "Standard_D8ds_v5" }, Roll, []string{"worker-cpu"}},
	{"pool onto InfiniBand", func(c *spec.Cluster) { c.Pools[1].VMSize = "Standard_ND96isr_H100_v5" }, Refused, nil},
	{"pool max nodes", func(c *spec.Cluster) { c.Pools[0].MaxNodes = 50 }, InPlace, nil},
	{"pool added", func(c *spec.Cluster) {
		c.Pools = append(c.Pools, spec.Pool{Name: "big", VMSize: "Standard_D16ds_v5", MaxNodes: 3, MaxPods: 30, Image: c.Image, GPU: new(bool),
			VNets: []string{"10.9.0.0/16"}})
	}, Roll, []string{"apiserver"}},
	{"pool removed", func(c *spec.Cluster) { c.Pools = c.Pools[:1] }, Refused, nil},
	{"dns replicas", func(c *spec.Cluster) { c.DNS.Replicas = 7 }, InPlace, nil},
	{"autoscaler", func(c *spec.Cluster) { c.Autoscaler.MaxScaleDownParallelism = 3 }, InPlace, nil},
	{"coredns", func(c *spec.Cluster) { c.Versions.CoreDNS = "v1.12.2" }, InPlace, nil},
	{"target nodes", func(c *spec.Cluster) { c.TargetNodes = 200 }, InPlace, nil},
	{"hub", func(c *spec.Cluster) { c.Network.Hub.AddressSpace = "10.254.0.0/16" }, InPlace, nil},
	{"control plane subnet", func(c *spec.Cluster) { c.Network.EtcdSubnet = "10.0.128.0/24" }, Refused, nil},
	{"worker VNet moved", func(c *spec.Cluster) { c.Pools[0].VNets = []string{"10.9.0.0/16"} }, Refused, nil},
	{"worker VNet added", func(c *spec.Cluster) { c.Pools[0].VNets = append(c.Pools[0].VNets, "10.9.0.0/16") }, Roll, []string{"apiserver"}},
	{"pods a node, same split", func(c *spec.Cluster) { c.Pools[0].MaxPods = 25 }, Roll, []string{"worker-cpu"}},
	{"pods a node, new split", func(c *spec.Cluster) { c.Pools[0].MaxPods = 100 }, Refused, nil},
	{"service range", func(c *spec.Cluster) { c.Network.ServiceCIDR = "172.17.0.0/16" }, Refused, nil},
	{"admin", func(c *spec.Cluster) { c.Admin.Username = "ops" }, Refused, nil},
	{"zones", func(c *spec.Cluster) { c.Zones = []string{"1"} }, Refused, nil},
	{"name", func(c *spec.Cluster) { c.Name = "cf-other" }, Refused, nil},
}

func TestClassification(t *testing.T) {
	base := applied(t)
	for _, e := range edits {
		t.Run(e.name, func(t *testing.T) {
			desired := copyOf(t, base)
			e.edit(desired)
			changes := Diff(base, desired)
			if len(changes) == 0 {
				t.Fatal("no change found")
			}
			if got := Worst(changes); got != e.class {
				t.Fatalf("classed %s, want %s: %v", got, e.class, changes)
			}
			if got := RolledRoles(desired, changes); !slices.Equal(got, e.roles) && e.class != Refused {
				t.Errorf("rolls %v, want %v", got, e.roles)
			}
			for _, c := range changes {
				if c.Reason == "" {
					t.Errorf("%s has no reason", c.Field)
				}
			}
		})
	}
}

// notInUserData are the edits that change what a machine runs without changing its rendered
// files: the binaries and the VM come from the image and the Azure model.
var notInUserData = []string{"kubernetes patch", "kubernetes minor", "kubernetes minor, workers held", "kubelet", "etcd patch", "etcd minor", "etcd size",
	"control-plane image", "pause image", "pool image"}

// The rules against the renderer: an edit rolls exactly the roles whose rendered machine (flags,
// config files, units) it changes, unless it changes the image or VM instead.
func TestRollsMatchRenderedMachines(t *testing.T) {
	base := applied(t)
	bundle, err := pki.Issue(pki.Authorities(base), pki.Profiles(base))
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range edits {
		if e.class == Refused || slices.Contains(notInUserData, e.name) {
			continue
		}
		t.Run(e.name, func(t *testing.T) {
			desired := copyOf(t, base)
			e.edit(desired)
			var rendered []string
			for _, role := range rollOrder(desired) {
				if !slices.Contains(base.Roles(), role) {
					continue
				}
				if !reflect.DeepEqual(render(t, base, bundle, role), render(t, desired, bundle, role)) {
					rendered = append(rendered, role)
				}
			}
			if got := RolledRoles(desired, Diff(base, desired)); !slices.Equal(got, rendered) {
				t.Errorf("rules roll %v; the rendered machines that changed are %v", got, rendered)
			}
		})
	}
}

func render(t *testing.T, c *spec.Cluster, b pki.Bundle, role string) machine.Machine {
	t.Helper()
	m, err := machine.Render(c, b, role)
	if err != nil {
		t.Fatal(err)
	}
	return m
}

func TestRefusalNamesTheFix(t *testing.T) {
	base := applied(t)
	desired := copyOf(t, base)
	desired.Versions.Kubernetes = "v1.38.0" // a minor past the pinned release
	desired.Network.EtcdSubnet = "10.0.128.0/24"
	_, err := NewPlan(base, desired, Inventory{})
	if err == nil {
		t.Fatal("planned a refused change")
	}
	for _, want := range []string{"versions.kubernetes", "one minor at a time", "1. versions.kubernetes: " + spec.DefaultKubernetesVersion,
		"2. versions.kubernetes: v1.38.0", "network.etcdSubnet", "new address plan is a new cluster"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("refusal lacks %q: %v", want, err)
		}
	}
}
