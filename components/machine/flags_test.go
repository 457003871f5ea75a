package machine

import (
	"strings"
	"testing"

	"github.com/clusterforge/clusterforge/components/pki"
	"github.com/clusterforge/clusterforge/components/spec"
)

func testCluster(t *testing.T) *spec.Cluster {
	t.Helper()
	c := &spec.Cluster{Name: "cf-test", Pools: []spec.Pool{{Name: "gpu", VMSize: "Standard_ND96asr_v4", Nodes: 7500}}}
	c.Default()
	return c
}

// renderAll renders every role of c with a throwaway PKI.
func renderAll(t *testing.T, c *spec.Cluster) []Machine {
	t.Helper()
	b, err := pki.Issue(pki.Authorities(c), pki.Profiles(c))
	if err != nil {
		t.Fatal(err)
	}
	machines, err := RenderAll(c, b)
	if err != nil {
		t.Fatal(err)
	}
	return machines
}

func TestLessonFlags(t *testing.T) {
	c := testCluster(t)
	main, events := c.EtcdClusters()[0], c.EtcdClusters()[1]
	api := APIServerFlags(c)
	etcd := EtcdFlags(main)
	for _, tc := range []struct {
		lesson, got, want string
	}{
		{"L02 data dir on the local disk", etcd["data-dir"], EtcdDataDir},
		{"L04 quota", etcd["quota-backend-bytes"], "8589934592"},
		{"etcd client cert auth", etcd["client-cert-auth"], "true"},
		{"etcd peer cert auth", etcd["peer-client-cert-auth"], "true"},
		{"L03 events override", api["etcd-servers-overrides"], "/events#" + strings.Join(events.ClientURLs(), ";")},
		{"L03 main servers", api["etcd-servers"], strings.Join(main.ClientURLs(), ",")},
		{"L05 lease reconciler", api["endpoint-reconciler-type"], "lease"},
		{"L06 audit path", api["audit-log-path"], AuditLogPath},
		{"L06 audit backups", api["audit-log-maxbackup"], "10"},
		{"L09 inflight", api["max-requests-inflight"], "2000"},
		{"L09 mutating inflight", api["max-mutating-requests-inflight"], "1000"},
		{"L04 compaction", api["etcd-compaction-interval"], "5m"},
	} {
		if tc.got != tc.want {
			t.Errorf("%s: %q, want %q", tc.lesson, tc.got, tc.want)
		}
	}
	if _, ok := api["insecure-port"]; ok {
		t.Error("apiserver has an insecure port")
	}
	if strings.Contains(strings.Join(etcd.Args(), " "), "auto-tls") {
		t.Error("etcd uses auto-tls")
	}
}

func TestSchedulerBinPacks(t *testing.T) {
	cfg := SchedulerConfig()
	for _, want := range []string{"type: MostAllocated", "name: InterPodAffinity\n        weight: 2", "leaderElect: true"} {
		if !strings.Contains(cfg, want) {
			t.Errorf("scheduler config lacks %q (L12)", want)
		}
	}
}

// The control plane serves and schedules gangs from the minor that has them in beta (L16); the
// releases before it, where the upgrade drills start, run without them (their API is alpha).
func TestGangSchedulingFollowsTheMinor(t *testing.T) {
	for _, tc := range []struct {
		version string
		gangs   bool
	}{{spec.DefaultKubernetesVersion, true}, {spec.PreviousKubernetesVersion, false}, {spec.HopKubernetesVersion, false}} {
		c := testCluster(t)
		c.Versions.Kubernetes = tc.version
		api, kcm, sched := APIServerFlags(c), ControllerManagerFlags(c), SchedulerFlags(c)
		// A gang's topology constraint is a field the apiserver drops and the scheduler ignores
		// unless both have TopologyAwareWorkloadScheduling.
		placed := strings.Contains(api["feature-gates"], "TopologyAwareWorkloadScheduling=true") && strings.Contains(sched["feature-gates"], "TopologyAwareWorkloadScheduling=true")
		on := strings.Contains(api["feature-gates"], "GenericWorkload=true") && api["runtime-config"] == GangAPI+"=true" &&
			strings.Contains(kcm["feature-gates"], "GenericWorkload=true") && strings.Contains(sched["feature-gates"], "GenericWorkload=true") && placed
		if on != tc.gangs {
			t.Errorf("Kubernetes %s: gangs on %t, want %t (apiserver %q %q, controller-manager %q, scheduler %q)",
				tc.version, on, tc.gangs, api["feature-gates"], api["runtime-config"], kcm["feature-gates"], sched["feature-gates"])
		}
	}
}

func TestKubeletPullsInParallel(t *testing.T) {
	c := testCluster(t)
	cfg := KubeletConfig(c, c.Pools[0])
	// 7,500 nodes × (10 pulls × 10 downloads + 16) SNAT ports fit the NAT gateway's 16 × 64,512.
	for _, want := range []string{"serializeImagePulls: false", "maxParallelImagePulls: 10", `key: "nvidia.com/gpu"`} {
		if !strings.Contains(cfg, want) {
			t.Errorf("kubelet config lacks %q", want)
		}
	}
}

func TestOversizedUserDataIsRefused(t *testing.T) {
	c := testCluster(t)
	c.Pools[0].Labels = map[string]string{"example.com/huge": strings.Repeat("x", spec.MaxCustomDataBytes)}
	err := Preflight(c)
	if fields := spec.Fields(err); len(fields) != 1 || fields[0] != "machines.worker-gpu" {
		t.Fatalf("want machines.worker-gpu refused, got %v", err)
	}
}

// A worker carries its own pool's join token, and none without a seed (its kubelet would ask as
// no one, and nothing would say why).
func TestWorkerCarriesItsPoolsJoinToken(t *testing.T) {
	c := testCluster(t)
	b, err := pki.Issue(pki.Authorities(c), pki.Profiles(c))
	if err != nil {
		t.Fatal(err)
	}
	m, err := Render(c, b, "worker-gpu")
	if err != nil {
		t.Fatal(err)
	}
	var kubeconfig string
	for _, f := range m.Files {
		if f.Path == KubeletBootstrapKubeconfig {
			kubeconfig = f.Content
		}
	}
	if token := pki.JoinToken(b.JoinSeed, "gpu"); !strings.Contains(kubeconfig, "token: "+token+"\n") {
		t.Errorf("the bootstrap kubeconfig does not carry the gpu pool's token %s:\n%s", token, kubeconfig)
	}
	b.JoinSeed = ""
	if _, err := Render(c, b, "worker-gpu"); err == nil {
		t.Error("a worker rendered without a join seed")
	}
}
