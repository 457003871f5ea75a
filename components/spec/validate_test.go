package spec

import (
	"slices"
	"strings"
	"testing"
)

// validYAML is a minimal valid spec; each case below breaks one rule of it.
const validYAML = `
name: cf-test
network:
  hub:
    vnetId: /subscriptions/s/resourceGroups/hub/providers/Microsoft.Network/virtualNetworks/hub
    addressSpace: 10.255.0.0/16
pools:
- name: cpu
  vmSize: Standard_D4ds_v5
  nodes: 2
  maxNodes: 10
`

func TestValidSpecParses(t *testing.T) {
	c, err := Parse([]byte(validYAML))
	if err != nil {
		t.Fatal(err)
	}
	if c.EtcdMain.Members != 5 || c.APIServer.Count != 5 || c.TargetNodes != 10 {
		t.Errorf("defaults: etcd %d, apiservers %d, target %d", c.EtcdMain.Members, c.APIServer.Count, c.TargetNodes)
	}
}

func TestValidationNamesTheField(t *testing.T) {
	for _, tc := range []struct {
		name   string
		edit   func(*Cluster)
		yaml   string // replaces validYAML when set
		field  string
		inText string
	}{
		{name: "unknown key", yaml: strings.Replace(validYAML, "  nodes: 2", "  nodez: 2", 1), field: "pools[].nodez", inText: "unknown key"},
		{name: "unknown top-level key", yaml: validYAML + "etcdMian:\n  members: 5\n", field: "etcdMian", inText: "unknown key"},
		{name: "bad cluster name", edit: func(c *Cluster) { c.Name = "Prod_1" }, field: "name"},
		{name: "even etcd members", edit: func(c *Cluster) { c.EtcdMain.Members = 4 }, field: "etcdMain.members", inText: "use 3 or 5"},
		{name: "even events members", edit: func(c *Cluster) { c.EtcdEvents.Members = 2 }, field: "etcdEvents.members"},
		{name: "too many members", edit: func(c *Cluster) { c.EtcdMain.Members = 9 }, field: "etcdMain.members"},
		{name: "quota above 8 GiB", edit: func(c *Cluster) { c.EtcdMain.QuotaBackendBytes = 9 << 30 }, field: "etcdMain.quotaBackendBytes", inText: "8 GiB"},
		{name: "etcd without local disk", edit: func(c *Cluster) { c.EtcdMain.VMSize = "Standard_D16s_v5" }, field: "etcdMain.vmSize", inText: "local"},
		{name: "events etcd without local disk", edit: func(c *Cluster) { c.EtcdEvents.VMSize = "Standard_E8s_v5" }, field: "etcdEvents.vmSize"},
		{name: "one apiserver", edit: func(c *Cluster) { c.APIServer.Count = 1 }, field: "apiServer.count"},
		{name: "bad apiserver size", edit: func(c *Cluster) { c.APIServer.VMSize = "big" }, field: "apiServer.vmSize"},
		{name: "bad compaction", edit: func(c *Cluster) { c.APIServer.EtcdCompactionInterval = "often" }, field: "apiServer.etcdCompactionInterval"},
		{name: "too many pods per NIC", edit: func(c *Cluster) { c.Kubelet.MaxPods = 300 }, field: "kubelet.maxPods"},
		{name: "no parallel downloads", edit: func(c *Cluster) { c.Kubelet.MaxConcurrentDownloads = -1 }, field: "kubelet.maxConcurrentDownloads", inText: "L24"},
		{name: "bad pull timeout", edit: func(c *Cluster) { c.Kubelet.ImagePullProgressTimeout = "soon" }, field: "kubelet.imagePullProgressTimeout", inText: "L23"},
		{name: "bad containerd version", edit: func(c *Cluster) { c.Versions.Containerd = "1.7" }, field: "versions.containerd"},
		{name: "bad scheduler-plugins version", edit: func(c *Cluster) { c.Versions.SchedulerPlugins = "latest" }, field: "versions.schedulerPlugins"},
		{name: "bad CoreDNS version", edit: func(c *Cluster) { c.Versions.CoreDNS = "1.12" }, field: "versions.coreDNS"},
		{name: "unready brake off", edit: func(c *Cluster) { c.Autoscaler.MaxUnreadyPercentage = 0 }, field: "autoscaler.maxUnreadyPercentage", inText: "L19"},
		{name: "negative unready count", edit: func(c *Cluster) { c.Autoscaler.OkUnreadyCount = -1 }, field: "autoscaler.okUnreadyCount"},
		{name: "no scale-down parallelism", edit: func(c *Cluster) { c.Autoscaler.MaxScaleDownParallelism = 0 }, field: "autoscaler.maxScaleDownParallelism"},
		{name: "bad unneeded time", edit: func(c *Cluster) { c.Autoscaler.ScaleDownUnneededTime = "ten minutes" }, field: "autoscaler.scaleDownUnneededTime", inText: "duration"},
		{name: "bad provision time", edit: func(c *Cluster) { c.Autoscaler.MaxNodeProvisionTime = "-5m" }, field: "autoscaler.maxNodeProvisionTime"},
		{name: "pool size of unknown capacity", edit: func(c *Cluster) { c.Pools[0].VMSize = "Standard_Q16ds_v5" }, field: "pools[0].vmSize", inText: "balloon"},
		{name: "no pools", edit: func(c *Cluster) { c.Pools = nil; c.TargetNodes = 10 }, field: "pools"},
		{name: "duplicate pool", edit: func(c *Cluster) { c.Pools = append(c.Pools, c.Pools[0]); c.TargetNodes = 20 }, field: "pools[1].name"},
		{name: "pool without local disk", edit: func(c *Cluster) { c.Pools[0].VMSize = "Standard_D16s_v5" }, field: "pools[0].vmSize", inText: "L22"},
		{name: "max below nodes", edit: func(c *Cluster) { c.Pools[0].MaxNodes = 1 }, field: "pools[0].maxNodes"},
		{name: "bad taint effect", edit: func(c *Cluster) { c.Pools[0].Taints = []Taint{{Key: "a", Effect: "Never"}} }, field: "pools[0].taints[0].effect"},
		{name: "bad image", edit: func(c *Cluster) { c.Pools[0].Image = "ubuntu" }, field: "pools[0].image"},
		{name: "target below pools", edit: func(c *Cluster) { c.TargetNodes = 5 }, field: "targetNodes"},
		{name: "malformed CIDR", edit: func(c *Cluster) { c.Network.ServiceCIDR = "172.16.0.0/33" }, field: "network.serviceCIDR", inText: "CIDR"},
		{name: "host bits set", edit: func(c *Cluster) { c.Network.EtcdSubnet = "10.0.1.5/24" }, field: "network.etcdSubnet", inText: "10.0.1.0/24"},
		{name: "overlapping subnets", edit: func(c *Cluster) { c.Network.EtcdSubnet = c.Network.ControlPlaneSubnet }, field: "network.etcdSubnet", inText: "overlaps"},
		{name: "subnet outside VNet", edit: func(c *Cluster) { c.Network.EtcdSubnet = "192.168.0.0/24" }, field: "network.etcdSubnet", inText: "outside"},
		{name: "service CIDR in VNet", edit: func(c *Cluster) { c.Network.ServiceCIDR = "10.0.2.0/24" }, field: "network.serviceCIDR"},
		{name: "hub overlaps spoke", edit: func(c *Cluster) { c.Network.Hub.AddressSpace = "10.0.0.0/8" }, field: "network.hub.addressSpace"},
		{name: "bad hub id", edit: func(c *Cluster) { c.Network.Hub.VNetID = "hub" }, field: "network.hub.vnetId"},
		{name: "pod space too small (L30)", edit: func(c *Cluster) { c.TargetNodes = 1000 }, field: "network.nodeSubnet", inText: "1000 nodes"},
		{name: "etcd subnet too small", edit: func(c *Cluster) { c.Network.EtcdSubnet = "10.0.1.0/28" }, field: "network.etcdSubnet"},
		{name: "API address outside subnet", edit: func(c *Cluster) { c.Network.APIServerIP = "10.0.1.10" }, field: "network.apiServerIP"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var err error
			if tc.yaml != "" {
				_, err = Parse([]byte(tc.yaml))
			} else {
				c, perr := Parse([]byte(validYAML))
				if perr != nil {
					t.Fatal(perr)
				}
				tc.edit(c)
				err = c.Validate()
			}
			if err == nil {
				t.Fatal("accepted")
			}
			if fields := Fields(err); !slices.Contains(fields, tc.field) {
				t.Fatalf("error names %v, want %s: %v", fields, tc.field, err)
			}
			if !strings.Contains(err.Error(), "clusterforge:cluster."+tc.field) || !strings.Contains(err.Error(), tc.inText) {
				t.Errorf("message %q lacks the field path or %q", err, tc.inText)
			}
		})
	}
}

func TestErrorsAreAllReportedAtOnce(t *testing.T) {
	c, err := Parse([]byte(validYAML))
	if err != nil {
		t.Fatal(err)
	}
	c.EtcdMain.Members, c.APIServer.Count = 4, 1
	if got := Fields(c.Validate()); len(got) != 2 {
		t.Errorf("fields %v, want both problems", got)
	}
}

func TestSizingFollowsNodeCount(t *testing.T) {
	for _, tc := range []struct {
		nodes                   int
		apiserver, etcd         string
		inflight, mutating      int
		quota                   int64
		eventsMembers, replicas int
	}{
		{10, "Standard_E4s_v5", "Standard_D2ds_v5", 400, 200, 4 << 30, 3, 2},
		{2500, "Standard_E16s_v5", "Standard_E8ds_v5", 1000, 500, 8 << 30, 3, 25},
		{7500, "Standard_E32s_v5", "Standard_L8s_v3", 2000, 1000, 8 << 30, 3, 75},
		{10000, "Standard_E48s_v5", "Standard_L16s_v3", 3000, 1000, 8 << 30, 5, 100},
	} {
		c := &Cluster{Name: "x", Pools: []Pool{{Name: "p", VMSize: "Standard_D4ds_v5", Nodes: tc.nodes}}}
		c.Default()
		a := c.APIServer
		if a.VMSize != tc.apiserver || c.EtcdMain.VMSize != tc.etcd || a.MaxRequestsInflight != tc.inflight ||
			a.MaxMutatingRequestsInflight != tc.mutating || c.EtcdMain.QuotaBackendBytes != tc.quota ||
			c.EtcdEvents.Members != tc.eventsMembers || c.DNS.Replicas != tc.replicas {
			t.Errorf("%d nodes: got apiserver %s etcd %s inflight %d/%d quota %d events %d dns %d",
				tc.nodes, a.VMSize, c.EtcdMain.VMSize, a.MaxRequestsInflight, a.MaxMutatingRequestsInflight,
				c.EtcdMain.QuotaBackendBytes, c.EtcdEvents.Members, c.DNS.Replicas)
		}
		if need := addressesFor(tc.nodes, c.Kubelet.MaxPods); size(mustPrefix(t, c.Network.NodeSubnet)) < need {
			t.Errorf("%d nodes: node subnet %s holds fewer than %d addresses", tc.nodes, c.Network.NodeSubnet, need)
		}
	}
}

func TestScaleSetsSplitLargePools(t *testing.T) {
	c := &Cluster{Pools: []Pool{{Name: "gpu", Nodes: 2500, MaxNodes: 2500}, {Name: "cpu", Nodes: 0, MaxNodes: 0}}}
	sets := c.ScaleSets()
	if len(sets) != 4 || sets[0].Name != "gpu-0" || sets[0].MaxNodes != 834 || sets[2].MaxNodes != 833 || sets[3].Name != "cpu" {
		t.Errorf("split: %+v", sets)
	}
	for _, s := range sets {
		if s.MaxNodes > MaxScaleSetInstances {
			t.Errorf("%s holds %d instances", s.Name, s.MaxNodes)
		}
	}
}

func TestHasLocalDisk(t *testing.T) {
	for size, want := range map[string]bool{
		"Standard_E16ds_v5": true, "Standard_L8s_v3": true, "Standard_DS15_v2": true, "Standard_D16s_v3": true,
		"Standard_ND96isr_H100_v5": true, "Standard_D16s_v5": false, "Standard_E32s_v5": false, "nonsense": false,
	} {
		if got := HasLocalDisk(size); got != want {
			t.Errorf("HasLocalDisk(%s) = %v", size, got)
		}
	}
}
