package spec

import (
	"crypto/ed25519"
	"crypto/rand"
	"crypto/rsa"
	"encoding/pem"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/clusterforge/clusterforge/components/wellknown"
	"golang.org/x/crypto/ssh"
)

// validSpec is a minimal valid spec; each case below breaks one rule of it.
const validSpec = `
name: cf-test
network:
  hub:
    vnetId: /subscriptions/00000000-0000-0000-0000-000000000001/resourceGroups/hub/providers/Microsoft.Network/virtualNetworks/hub
    addressSpace: 10.255.0.0/16
pools:
- name: cpu
  vmSize: Standard_D4ds_v5
  nodes: 2
  maxNodes: 10
- name: system
  vmSize: Standard_D4ds_v5
  nodes: 2
  maxNodes: 3
  system: true
`

// stackFile wraps a spec in a Pulumi stack file.
func stackFile(spec string) []byte {
	var b strings.Builder
	b.WriteString("config:\n  clusterforge:cluster:\n")
	for _, line := range strings.Split(strings.TrimPrefix(spec, "\n"), "\n") {
		b.WriteString("    " + line + "\n")
	}
	return []byte(b.String())
}

func parseValid(t *testing.T) *Cluster {
	t.Helper()
	c, err := ParseStackFile(stackFile(validSpec))
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func TestValidSpecParses(t *testing.T) {
	c := parseValid(t)
	if c.EtcdMain.Members != 5 || c.APIServer.Count != 5 || c.TargetNodes != 13 || c.Location != DefaultLocation {
		t.Errorf("defaults: etcd %d, apiservers %d, target %d, location %s", c.EtcdMain.Members, c.APIServer.Count, c.TargetNodes, c.Location)
	}
}

func publicKey(t *testing.T, rsaBits int) (public, private string) {
	t.Helper()
	var key any
	if rsaBits > 0 {
		k, err := rsa.GenerateKey(rand.Reader, rsaBits)
		if err != nil {
			t.Fatal(err)
		}
		key = k
	} else {
		_, k, err := ed25519.GenerateKey(rand.Reader)
		if err != nil {
			t.Fatal(err)
		}
		key = k
	}
	signer, err := ssh.NewSignerFromKey(key)
	if err != nil {
		t.Fatal(err)
	}
	block, err := ssh.MarshalPrivateKey(key, "")
	if err != nil {
		t.Fatal(err)
	}
	return string(ssh.MarshalAuthorizedKey(signer.PublicKey())), string(pem.EncodeToMemory(block))
}

// Every rule has a row here: the exact field path its error names, and a word of its fix.
func TestValidationNamesTheField(t *testing.T) {
	edPub, edPrivate := publicKey(t, 0)
	weakPub, _ := publicKey(t, 1024)
	for _, tc := range []struct {
		name   string
		edit   func(*Cluster)
		field  string
		inText string
	}{
		{name: "bad cluster name", edit: func(c *Cluster) { c.Name = "Prod_1" }, field: "name"},
		{name: "no system pool", edit: func(c *Cluster) { c.Pools[1].System = false }, field: "pools", inText: "no pool is the system pool"},
		{name: "two system pools", edit: func(c *Cluster) { c.Pools[0].System = true }, field: "pools[1].system", inText: "another pool"},
		{name: "a GPU system pool", edit: func(c *Cluster) {
			c.Pools[1].VMSize, c.Pools[1].GPU = "Standard_NC4as_T4_v3", ptrTo(true)
		}, field: "pools[1].system", inText: "GPU"},
		{name: "a system pool of one node", edit: func(c *Cluster) { c.Pools[1].Nodes = 1 }, field: "pools[1].nodes", inText: "clusterforge-ops"},
		{name: "no pool for the teams", edit: func(c *Cluster) { c.Pools = c.Pools[1:] }, field: "pools", inText: "only pool is the system pool"},
		{name: "cluster name ends in a hyphen", edit: func(c *Cluster) { c.Name = "prod-" }, field: "name"},
		{name: "unknown region", edit: func(c *Cluster) { c.Location = "eastus2-1" }, field: "location", inText: "availability zones"},
		{name: "region without zones", edit: func(c *Cluster) { c.Location = "westcentralus" }, field: "location"},
		{name: "zone name", edit: func(c *Cluster) { c.Zones = []string{"1", "eastus2-1"} }, field: "zones[1]"},
		{name: "zone twice", edit: func(c *Cluster) { c.Zones = []string{"1", "1"} }, field: "zones[1]"},
		{name: "no zones", edit: func(c *Cluster) { c.Zones = nil }, field: "zones"},
		{name: "admin root", edit: func(c *Cluster) { c.Admin.Username = "root" }, field: "admin.username", inText: "reserved"},
		{name: "admin Azure-reserved", edit: func(c *Cluster) { c.Admin.Username = "administrator" }, field: "admin.username"},
		{name: "admin with a space", edit: func(c *Cluster) { c.Admin.Username = "ops team" }, field: "admin.username"},
		{name: "private SSH key", edit: func(c *Cluster) { c.Admin.SSHPublicKey = edPrivate }, field: "admin.sshPublicKey", inText: "public half"},
		{name: "weak RSA key", edit: func(c *Cluster) { c.Admin.SSHPublicKey = weakPub }, field: "admin.sshPublicKey", inText: "2048"},
		{name: "two SSH keys", edit: func(c *Cluster) { c.Admin.SSHPublicKey = edPub + edPub }, field: "admin.sshPublicKey", inText: "one"},
		{name: "SSH key with options", edit: func(c *Cluster) { c.Admin.SSHPublicKey = `command="sh" ` + edPub }, field: "admin.sshPublicKey", inText: "options"},
		{name: "not an SSH key", edit: func(c *Cluster) { c.Admin.SSHPublicKey = "ssh-ed25519 AAAA" }, field: "admin.sshPublicKey"},
		{name: "hub id with $(...)", edit: func(c *Cluster) {
			c.Network.Hub.VNetID = "/subscriptions/00000000-0000-0000-0000-000000000001/resourceGroups/$(reboot)/providers/Microsoft.Network/virtualNetworks/hub"
		}, field: "network.hub.vnetId", inText: "resource id"},
		{name: "hub id with ..", edit: func(c *Cluster) {
			c.Network.Hub.VNetID = "/subscriptions/00000000-0000-0000-0000-000000000001/resourceGroups/hub/providers/Microsoft.Network/virtualNetworks/../../x"
		}, field: "network.hub.vnetId"},
		{name: "hub subscription not a GUID", edit: func(c *Cluster) {
			c.Network.Hub.VNetID = "/subscriptions/s/resourceGroups/hub/providers/Microsoft.Network/virtualNetworks/hub"
		}, field: "network.hub.vnetId"},
		{name: "hub id of a subnet", edit: func(c *Cluster) { c.Network.Hub.VNetID += "/subnets/a" }, field: "network.hub.vnetId"},
		{name: "image without version", edit: func(c *Cluster) { c.Image = strings.TrimSuffix(c.Image, "/versions/0.0.0") }, field: "image"},
		{name: "image version not numeric", edit: func(c *Cluster) { c.Image = strings.Replace(c.Image, "0.0.0", "latest", 1) }, field: "image"},
		{name: "pool image with $(...)", edit: func(c *Cluster) { c.Pools[0].Image = strings.Replace(c.Pools[0].Image, "worker", "$(id)", 1) }, field: "pools[0].image"},
		{name: "control plane booting the worker image", edit: func(c *Cluster) { c.ControlPlaneImage = c.Image }, field: "controlPlaneImage"},
		{name: "workers booting the control-plane image", edit: func(c *Cluster) { c.Image = c.ControlPlaneImage }, field: "image"},
		{name: "gpu image of the cpu variant", edit: func(c *Cluster) { c.GPUImage = c.Image }, field: "gpuImage"},
		{name: "cpu pool booting the gpu image", edit: func(c *Cluster) { c.Pools[0].Image = c.GPUImage }, field: "pools[0].image"},
		{name: "even etcd members", edit: func(c *Cluster) { c.EtcdMain.Members = 4 }, field: "etcdMain.members", inText: "use 3 or 5"},
		{name: "even events members", edit: func(c *Cluster) { c.EtcdEvents.Members = 2 }, field: "etcdEvents.members"},
		{name: "too many members", edit: func(c *Cluster) { c.EtcdMain.Members = 9 }, field: "etcdMain.members"},
		{name: "quota above 8 GiB", edit: func(c *Cluster) { c.EtcdMain.QuotaBackendBytes = 9 << 30 }, field: "etcdMain.quotaBackendBytes", inText: "8 GiB"},
		{name: "quota below 1 GiB", edit: func(c *Cluster) { c.EtcdMain.QuotaBackendBytes = 8 << 20 }, field: "etcdMain.quotaBackendBytes"},
		{name: "etcd without local disk", edit: func(c *Cluster) { c.EtcdMain.VMSize = "Standard_D16s_v5" }, field: "etcdMain.vmSize", inText: "local"},
		{name: "events etcd without local disk", edit: func(c *Cluster) { c.EtcdEvents.VMSize = "Standard_E8s_v5" }, field: "etcdEvents.vmSize"},
		{name: "etcd memory below quota", edit: func(c *Cluster) { c.EtcdMain.VMSize = "Standard_D2ds_v5"; c.EtcdMain.QuotaBackendBytes = 8 << 30 }, field: "etcdMain.vmSize", inText: "memory"},
		{name: "unknown etcd size", edit: func(c *Cluster) { c.EtcdMain.VMSize = "Standard_Z8ds_v9" }, field: "etcdMain.vmSize", inText: "spec.vmSizes"},
		{name: "one apiserver", edit: func(c *Cluster) { c.APIServer.Count = 1 }, field: "apiServer.count"},
		{name: "5000 apiservers", edit: func(c *Cluster) { c.APIServer.Count = 5000 }, field: "apiServer.count"},
		{name: "bad apiserver size", edit: func(c *Cluster) { c.APIServer.VMSize = "big" }, field: "apiServer.vmSize"},
		{name: "no inflight", edit: func(c *Cluster) { c.APIServer.MaxMutatingRequestsInflight = 0 }, field: "apiServer.maxMutatingRequestsInflight"},
		{name: "no audit backups", edit: func(c *Cluster) { c.APIServer.AuditLogMaxBackup = 0 }, field: "apiServer.auditLogMaxBackup"},
		{name: "bad compaction", edit: func(c *Cluster) { c.APIServer.EtcdCompactionInterval = "often" }, field: "apiServer.etcdCompactionInterval"},
		{name: "compaction off", edit: func(c *Cluster) { c.APIServer.EtcdCompactionInterval = "0s" }, field: "apiServer.etcdCompactionInterval"},
		{name: "too many pods per NIC", edit: func(c *Cluster) { c.Kubelet.MaxPods = 300 }, field: "kubelet.maxPods"},
		{name: "too many pods per NIC in a pool", edit: func(c *Cluster) { c.Pools[0].MaxPods = 256 }, field: "pools[0].maxPods"},
		{name: "no pods in a pool", edit: func(c *Cluster) { c.Pools[0].MaxPods = 0 }, field: "pools[0].maxPods"},
		{name: "no process limit per pod", edit: func(c *Cluster) { c.Kubelet.PodPidsLimit = -1 }, field: "kubelet.podPidsLimit"},
		{name: "a process limit past the node's", edit: func(c *Cluster) { c.Kubelet.PodPidsLimit = MaxPodPids + 1 }, field: "kubelet.podPidsLimit"},
		{name: "no parallel downloads", edit: func(c *Cluster) { c.Kubelet.MaxConcurrentDownloads = -1 }, field: "kubelet.maxConcurrentDownloads", inText: "L24"},
		{name: "no parallel pulls", edit: func(c *Cluster) { c.Kubelet.MaxParallelImagePulls = 0 }, field: "kubelet.maxParallelImagePulls", inText: "L20"},
		{name: "bad pull timeout", edit: func(c *Cluster) { c.Kubelet.ImagePullProgressTimeout = "soon" }, field: "kubelet.imagePullProgressTimeout"},
		{name: "bad containerd version", edit: func(c *Cluster) { c.Versions.Containerd = "1.7" }, field: "versions.containerd"},
		{name: "unbuildable kubernetes", edit: func(c *Cluster) { c.Versions.Kubernetes = "v1.35.1" }, field: "versions.kubernetes", inText: "toolchain"},
		{name: "pre-release", edit: func(c *Cluster) { c.Versions.Etcd = "v3.7.3-rc.0" }, field: "versions.etcd"},
		{name: "autoscaler not a release", edit: func(c *Cluster) { c.Versions.ClusterAutoscaler = "v1.36.0-rc.1" }, field: "versions.clusterAutoscaler"},
		{name: "device plugin with an escape", edit: func(c *Cluster) { c.Versions.NvidiaDevicePlugin = "v0.17.2" }, field: "versions.nvidiaDevicePlugin", inText: "CVE-2025-23266"},
		{name: "kubelet ahead of the control plane", edit: func(c *Cluster) { c.Versions.Kubernetes = PreviousKubernetesVersion }, field: "versions.kubelet", inText: "newer"},
		{name: "kubelet four minors behind", edit: func(c *Cluster) { c.Versions.Kubelet = "v1.33.4" }, field: "versions.kubelet", inText: "skew"},
		{name: "a held worker's runc newer than the pin", edit: func(c *Cluster) { c.Versions.Kubelet, c.Versions.Runc = PreviousKubernetesVersion, "v9.0.0" }, field: "versions.runc", inText: "newer"},
		{name: "containerd of old workers, not held", edit: func(c *Cluster) { c.Versions.Containerd = "v1.7.28" }, field: "versions.containerd", inText: "toolchain"},
		{name: "bad CoreDNS version", edit: func(c *Cluster) { c.Versions.CoreDNS = "1.12" }, field: "versions.coreDNS"},
		{name: "pause image without tag", edit: func(c *Cluster) { c.Versions.PauseImage = "registry.k8s.io/pause" }, field: "versions.pauseImage"},
		{name: "team quota name injection", edit: func(c *Cluster) { c.Teams.Quota["pods,services.nodeports=9"] = "1" }, field: `teams.quota["pods,services.nodeports=9"]`},
		{name: "team quota quantity injection", edit: func(c *Cluster) { c.Teams.Quota["pods"] = "1,services.nodeports=9" }, field: "teams.quota[pods]"},
		{name: "team quota unknown resource", edit: func(c *Cluster) { c.Teams.Quota["widgets"] = "1" }, field: "teams.quota[widgets]"},
		{name: "team quota negative", edit: func(c *Cluster) { c.Teams.Quota["secrets"] = "-1" }, field: "teams.quota[secrets]"},
		{name: "team footprint past half of etcd-main", edit: func(c *Cluster) { c.Teams.Quota["count/jobs.batch"] = "40000" }, field: "teams"},
		{name: "team objects smaller than a pod", edit: func(c *Cluster) { c.Teams.MaxObjectBytes = 1024 }, field: "teams.maxObjectBytes"},
		{name: "team ConfigMaps past a write", edit: func(c *Cluster) { c.Teams.MaxDataObjectBytes = 4 << 20 }, field: "teams.maxDataObjectBytes"},
		{name: "team priority class of the add-ons", edit: func(c *Cluster) {
			c.Teams.PriorityClasses = []TeamPriorityClass{{Name: "clusterforge-system", Value: 500}}
		}, field: "teams.priorityClasses[0].name"},
		{name: "team priority class injection", edit: func(c *Cluster) {
			c.Teams.PriorityClasses = []TeamPriorityClass{{Name: "urgent', 'system-node-critical", Value: 500}}
		}, field: "teams.priorityClasses[0].name"},
		{name: "team priority class twice", edit: func(c *Cluster) {
			c.Teams.PriorityClasses = []TeamPriorityClass{{Name: "urgent", Value: 500}, {Name: "urgent", Value: 600}}
		}, field: "teams.priorityClasses[1].name"},
		{name: "team priority above the add-ons", edit: func(c *Cluster) { c.Teams.PriorityClasses = []TeamPriorityClass{{Name: "urgent", Value: 2_000_000}} }, field: "teams.priorityClasses[0].value"},
		{name: "too many team priority classes", edit: func(c *Cluster) {
			for i := range MaxTeamPriorityClasses + 1 {
				c.Teams.PriorityClasses = append(c.Teams.PriorityClasses, TeamPriorityClass{Name: "c" + strconv.Itoa(i), Value: 500})
			}
		}, field: "teams.priorityClasses"},
		{name: "team priority at the borrow class", edit: func(c *Cluster) { c.Teams.PriorityClasses = []TeamPriorityClass{{Name: "urgent", Value: 100}} }, field: "teams.priorityClasses[0].value"},
		{name: "pause image injection", edit: func(c *Cluster) { c.Versions.PauseImage = "registry.k8s.io/pause:3.10\"\nx=1" }, field: "versions.pauseImage"},
		{name: "unready brake off", edit: func(c *Cluster) { c.Autoscaler.MaxUnreadyPercentage = 0 }, field: "autoscaler.maxUnreadyPercentage", inText: "L19"},
		{name: "negative unready count", edit: func(c *Cluster) { c.Autoscaler.OkUnreadyCount = -1 }, field: "autoscaler.okUnreadyCount"},
		{name: "no scale-down parallelism", edit: func(c *Cluster) { c.Autoscaler.MaxScaleDownParallelism = 0 }, field: "autoscaler.maxScaleDownParallelism"},
		{name: "bad unneeded time", edit: func(c *Cluster) { c.Autoscaler.ScaleDownUnneededTime = "ten minutes" }, field: "autoscaler.scaleDownUnneededTime", inText: "duration"},
		{name: "bad delay after add", edit: func(c *Cluster) { c.Autoscaler.ScaleDownDelayAfterAdd = "1000h" }, field: "autoscaler.scaleDownDelayAfterAdd"},
		{name: "bad provision time", edit: func(c *Cluster) { c.Autoscaler.MaxNodeProvisionTime = "-5m" }, field: "autoscaler.maxNodeProvisionTime"},
		{name: "negative DNS replicas", edit: func(c *Cluster) { c.DNS.Replicas = -4 }, field: "dns.replicas"},
		{name: "one DNS replica", edit: func(c *Cluster) { c.DNS.Replicas = 1 }, field: "dns.replicas", inText: "L13"},
		{name: "DNS replicas above nodes", edit: func(c *Cluster) { c.DNS.Replicas = c.TargetNodes + 1 }, field: "dns.replicas"},
		{name: "pool size unknown", edit: func(c *Cluster) { c.Pools[0].VMSize = "Standard_Q16ds_v5" }, field: "pools[0].vmSize", inText: "spec.vmSizes"},
		{name: "no pools", edit: func(c *Cluster) { c.Pools = nil; c.TargetNodes = 10 }, field: "pools"},
		{name: "17 pools", edit: func(c *Cluster) {
			for range 16 {
				c.Pools = append(c.Pools, c.Pools[0])
			}
		}, field: "pools"},
		{name: "duplicate pool", edit: func(c *Cluster) { c.Pools = append(c.Pools, c.Pools[0]); c.TargetNodes = 30 }, field: "pools[2].name"},
		{name: "bad pool name", edit: func(c *Cluster) { c.Pools[0].Name = "CPU" }, field: "pools[0].name"},
		{name: "pool without local disk", edit: func(c *Cluster) { c.Pools[0].VMSize = "Standard_D16s_v5" }, field: "pools[0].vmSize", inText: "L22"},
		{name: "gpu on a CPU size", edit: func(c *Cluster) { gpu := true; c.Pools[0].GPU = &gpu }, field: "pools[0].gpu"},
		{name: "max below nodes", edit: func(c *Cluster) { c.Pools[0].MaxNodes = 1 }, field: "pools[0].maxNodes"},
		{name: "negative nodes", edit: func(c *Cluster) { c.Pools[0].Nodes = -1 }, field: "pools[0].nodes"},
		{name: "overflowing maxNodes", edit: func(c *Cluster) { c.Pools[0].MaxNodes = 4611686018427387904 }, field: "pools[0].maxNodes"},
		{name: "target above limit", edit: func(c *Cluster) { c.TargetNodes = 20001 }, field: "targetNodes"},
		{name: "target below pools", edit: func(c *Cluster) { c.TargetNodes = 5 }, field: "targetNodes"},
		{name: "label key with a space", edit: func(c *Cluster) { c.Pools[0].Labels = map[string]string{"a b": "x"} }, field: `pools[0].labels["a b"]`},
		{name: "label value with a space", edit: func(c *Cluster) {
			c.Pools[0].Labels = map[string]string{"team": "x --authorization-mode=AlwaysAllow"}
		}, field: "pools[0].labels[team]", inText: "value"},
		{name: "label value with a newline", edit: func(c *Cluster) {
			c.Pools[0].Labels = map[string]string{"team": "x\nExecStartPre=/bin/sh -c id"}
		}, field: "pools[0].labels[team]"},
		{name: "label value too long", edit: func(c *Cluster) { c.Pools[0].Labels = map[string]string{"team": strings.Repeat("a", 64)} }, field: "pools[0].labels[team]"},
		{name: "kubernetes.io label", edit: func(c *Cluster) { c.Pools[0].Labels = map[string]string{"kubernetes.io/role": "x"} }, field: "pools[0].labels[kubernetes.io/role]", inText: "kubelet"},
		{name: "k8s.io subdomain label", edit: func(c *Cluster) { c.Pools[0].Labels = map[string]string{"x.k8s.io/a": "b"} }, field: "pools[0].labels[x.k8s.io/a]"},
		{name: "hostname label", edit: func(c *Cluster) { c.Pools[0].Labels = map[string]string{"kubernetes.io/hostname": "a"} }, field: "pools[0].labels[kubernetes.io/hostname]", inText: "reserved"},
		{name: "pool label", edit: func(c *Cluster) { c.Pools[0].Labels = map[string]string{wellknown.PoolLabel: "gpu"} }, field: "pools[0].labels[" + wellknown.PoolLabel + "]"},
		{name: "taint key", edit: func(c *Cluster) { c.Pools[0].Taints = []Taint{{Key: "a b", Effect: "NoSchedule"}} }, field: "pools[0].taints[0].key"},
		{name: "kubernetes.io taint", edit: func(c *Cluster) {
			c.Pools[0].Taints = []Taint{{Key: "node.kubernetes.io/unschedulable", Effect: "NoSchedule"}}
		}, field: "pools[0].taints[0].key"},
		{name: "clusterforge.io taint", edit: func(c *Cluster) {
			c.Pools[0].Taints = []Taint{{Key: "clusterforge.io/preflight", Effect: "NoSchedule"}}
		}, field: "pools[0].taints[0].key", inText: "reserved"},
		{name: "taint value", edit: func(c *Cluster) { c.Pools[0].Taints = []Taint{{Key: "a", Value: "x\ny", Effect: "NoSchedule"}} }, field: "pools[0].taints[0].value"},
		{name: "bad taint effect", edit: func(c *Cluster) { c.Pools[0].Taints = []Taint{{Key: "a", Effect: "Never"}} }, field: "pools[0].taints[0].effect"},
		{name: "taint twice", edit: func(c *Cluster) {
			c.Pools[0].Taints = []Taint{{Key: "a", Effect: "NoSchedule"}, {Key: "a", Value: "b", Effect: "NoSchedule"}}
		}, field: "pools[0].taints[1]"},
		{name: "bad image", edit: func(c *Cluster) { c.Pools[0].Image = "ubuntu" }, field: "pools[0].image"},
		{name: "malformed CIDR", edit: func(c *Cluster) { c.Network.ServiceCIDR = "172.16.0.0/33" }, field: "network.serviceCIDR", inText: "CIDR"},
		{name: "public CIDR", edit: func(c *Cluster) { c.Network.Hub.AddressSpace = "8.8.0.0/16" }, field: "network.hub.addressSpace", inText: "private"},
		{name: "host bits set", edit: func(c *Cluster) { c.Network.EtcdSubnet = "10.0.1.5/24" }, field: "network.etcdSubnet", inText: "10.0.1.0/24"},
		{name: "overlapping subnets", edit: func(c *Cluster) { c.Network.EtcdSubnet = c.Network.ControlPlaneSubnet }, field: "network.etcdSubnet", inText: "overlaps"},
		{name: "subnet outside VNet", edit: func(c *Cluster) { c.Network.EtcdSubnet = "192.168.0.0/24" }, field: "network.etcdSubnet", inText: "outside"},
		{name: "subnet below /29", edit: func(c *Cluster) { c.Network.ControlPlaneSubnet = "10.0.0.0/30"; c.Network.APIServerIP = "10.0.0.2" }, field: "network.controlPlaneSubnet"},
		{name: "service CIDR in VNet", edit: func(c *Cluster) { c.Network.ServiceCIDR = "10.0.1.0/24" }, field: "network.serviceCIDR"},
		{name: "service CIDR too small for DNS", edit: func(c *Cluster) { c.Network.ServiceCIDR = "172.16.0.0/29" }, field: "network.serviceCIDR"},
		{name: "service CIDR above /12", edit: func(c *Cluster) { c.Network.ServiceCIDR = "172.16.0.0/11" }, field: "network.serviceCIDR"},
		{name: "hub overlaps spoke", edit: func(c *Cluster) { c.Network.Hub.AddressSpace = "10.0.0.0/8" }, field: "network.hub.addressSpace"},
		{name: "worker VNet too small", edit: func(c *Cluster) { c.Pools[0].VNets = []string{"10.1.0.0/20"} }, field: "pools[0].vnets[0]", inText: "too small"},
		{name: "worker VNet on the control plane's", edit: func(c *Cluster) { c.Pools[0].VNets = []string{"10.0.0.0/16"} }, field: "pools[0].vnets[0]", inText: "overlaps"},
		{name: "worker VNet on the hub", edit: func(c *Cluster) { c.Pools[0].VNets = []string{"10.255.0.0/16"} }, field: "network.hub.addressSpace"},
		{name: "pool short of VNets", edit: func(c *Cluster) { c.Pools[0].VNets = nil }, field: "pools[0].vnets", inText: "make freeze"},
		{name: "hub's addresses fill the peered group", edit: func(c *Cluster) { c.Network.Hub.AddressesInUse = 127990 }, field: "pools", inText: "peered"},
		{name: "hub's addresses negative", edit: func(c *Cluster) { c.Network.Hub.AddressesInUse = -1 }, field: "network.hub.addressesInUse"},
		{name: "etcd subnet too small", edit: func(c *Cluster) { c.Network.EtcdSubnet = "10.0.1.0/28" }, field: "network.etcdSubnet"},
		{name: "etcd member on the last address", edit: func(c *Cluster) { c.Network.EtcdSubnet = "10.0.1.0/27" }, field: "network.etcdSubnet"},
		{name: "control plane too small", edit: func(c *Cluster) { c.Network.ControlPlaneSubnet = "10.0.0.0/29"; c.Network.APIServerIP = "10.0.0.5" }, field: "network.controlPlaneSubnet"},
		{name: "API address outside subnet", edit: func(c *Cluster) { c.Network.APIServerIP = "10.0.1.10" }, field: "network.apiServerIP"},
		{name: "API address Azure keeps", edit: func(c *Cluster) { c.Network.APIServerIP = "10.0.0.3" }, field: "network.apiServerIP", inText: "reserved"},
		{name: "API address broadcast", edit: func(c *Cluster) { c.Network.APIServerIP = "10.0.0.255" }, field: "network.apiServerIP"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := parseValid(t)
			tc.edit(c)
			err := c.Validate()
			if err == nil {
				t.Fatal("accepted")
			}
			if fields := Fields(err); !slices.Contains(fields, tc.field) {
				t.Fatalf("error names %v, want %s: %v", fields, tc.field, err)
			}
			if !strings.Contains(err.Error(), ConfigKey+"."+tc.field) || !strings.Contains(err.Error(), tc.inText) {
				t.Errorf("message %q lacks the field path or %q", err, tc.inText)
			}
			if strings.Contains(err.Error(), "PRIVATE") || strings.Contains(err.Error(), strings.Split(edPrivate, "\n")[1]) {
				t.Errorf("the error echoes the private key: %v", err)
			}
		})
	}
}

func TestValidValuesPass(t *testing.T) {
	edPub, _ := publicKey(t, 0)
	rsaPub, _ := publicKey(t, 2048)
	for name, edit := range map[string]func(*Cluster){
		"ed25519 key":        func(c *Cluster) { c.Admin.SSHPublicKey = edPub },
		"rsa key":            func(c *Cluster) { c.Admin.SSHPublicKey = rsaPub },
		"node.kubernetes.io": func(c *Cluster) { c.Pools[0].Labels = map[string]string{"node.kubernetes.io/role": "train"} },
		"kubelet subdomain":  func(c *Cluster) { c.Pools[0].Labels = map[string]string{"a.kubelet.kubernetes.io/x": ""} },
		"own prefix":         func(c *Cluster) { c.Pools[0].Labels = map[string]string{"example.com/team": "a-b_c.d"} },
		"taint": func(c *Cluster) {
			c.Pools[0].Taints = []Taint{{Key: "example.com/dedicated", Value: "x", Effect: "NoExecute"}}
		},
		"service /24":       func(c *Cluster) { c.Network.ServiceCIDR = "172.16.0.0/24" },
		"two zones":         func(c *Cluster) { c.Zones = []string{"2", "3"} },
		"west europe":       func(c *Cluster) { c.Location = "westeurope" },
		"API address at .4": func(c *Cluster) { c.Network.APIServerIP = "10.0.0.4" },
		"pause image digested": func(c *Cluster) {
			c.Versions.PauseImage = "myregistry.azurecr.io:5000/k8s/pause:3.10@sha256:" + strings.Repeat("a", 64)
		},
		// Workers held on what a 1.34 cluster runs, three minors behind: nothing here builds those.
		"workers held": func(c *Cluster) {
			c.Versions.Kubelet, c.Versions.Containerd, c.Versions.Runc, c.Versions.Crictl = "v1.34.2", "v1.7.28", "v1.3.0", "v1.34.0"
		},
		"the hop": func(c *Cluster) {
			c.Versions.Kubernetes, c.Versions.Kubelet = HopKubernetesVersion, HopKubernetesVersion
		},
	} {
		c := parseValid(t)
		edit(c)
		if err := c.Validate(); err != nil {
			t.Errorf("%s: %v", name, err)
		}
	}
}

func TestErrorsAreAllReportedAtOnce(t *testing.T) {
	c := parseValid(t)
	c.EtcdMain.Members, c.APIServer.Count = 4, 1
	if got := Fields(c.Validate()); len(got) != 2 {
		t.Errorf("fields %v, want both problems", got)
	}
}

func TestAuthorizedKeyIsCanonical(t *testing.T) {
	edPub, _ := publicKey(t, 0)
	a := Admin{SSHPublicKey: strings.TrimSpace(edPub) + " someone@laptop\n"}
	if got := a.AuthorizedKey(); got != strings.TrimSpace(edPub) {
		t.Errorf("AuthorizedKey() = %q, want %q", got, strings.TrimSpace(edPub))
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
		// Two scale sets of 1,000 nodes and their 30 pods fit a /16 (65,531 addresses), three do not.
		if want := (tc.nodes + 1999) / 2000; len(c.Pools[0].VNets) != want || mustPrefix(t, c.Pools[0].VNets[0]).Bits() != 16 {
			t.Errorf("%d nodes: worker VNets %v, want %d /16s", tc.nodes, c.Pools[0].VNets, want)
		}
		// Every size a tier picks is in the table, with the facts its role needs.
		for _, s := range []string{a.VMSize, c.EtcdMain.VMSize, c.EtcdEvents.VMSize} {
			if _, ok := VMCapacity(s); !ok {
				t.Errorf("tier size %s is not in spec.vmSizes", s)
			}
		}
	}
}

// Defaulting an absurd count neither overflows nor hangs; Validate refuses it.
func TestDefaultSurvivesHugeCounts(t *testing.T) {
	c := &Cluster{Name: "x", Pools: []Pool{
		{Name: "a", VMSize: "Standard_D4ds_v5", MaxNodes: 1 << 62}, {Name: "b", VMSize: "Standard_D4ds_v5", MaxNodes: 1 << 62},
	}}
	c.Default()
	if c.TargetNodes <= 0 || c.Network.AddressSpace == "" {
		t.Errorf("target %d, address space %q", c.TargetNodes, c.Network.AddressSpace)
	}
	if fields := Fields(c.Validate()); !slices.Contains(fields, "pools[0].maxNodes") || !slices.Contains(fields, "pools[1].maxNodes") {
		t.Errorf("fields %v", fields)
	}
}

func TestScaleSetsSplitLargePools(t *testing.T) {
	c := &Cluster{Pools: []Pool{{Name: "gpu", Nodes: 2500, MaxNodes: 2500}, {Name: "cpu", Nodes: 0, MaxNodes: 0}}}
	sets := c.ScaleSets()
	if len(sets) != 4 || sets[0].Name != "gpu-0" || sets[0].MaxNodes != 834 || sets[2].MaxNodes != 833 || sets[3].Name != "cpu" {
		t.Errorf("split: %+v", sets)
	}
	for _, s := range sets {
		if s.MaxNodes > MaxScaleSetInstances || s.SinglePlacementGroup {
			t.Errorf("%s holds %d instances, single placement group %v", s.Name, s.MaxNodes, s.SinglePlacementGroup)
		}
	}
	// InfiniBand sizes: one placement group per scale set, at most 100 instances, one zone each in turn.
	c = &Cluster{Zones: []string{"1", "2", "3"}, Pools: []Pool{{Name: "h100", VMSize: "Standard_ND96isr_H100_v5", Nodes: 10, MaxNodes: 250}}}
	sets = c.ScaleSets()
	if len(sets) != 3 || sets[0].MaxNodes != 84 || sets[2].MaxNodes != 83 || sets[0].Nodes != 4 {
		t.Errorf("InfiniBand split: %+v", sets)
	}
	for i, s := range sets {
		if !s.SinglePlacementGroup || s.MaxNodes > 100 || !slices.Equal(s.Zones, []string{c.Zones[i]}) {
			t.Errorf("%s: single placement group %v, %d instances, zones %v", s.Name, s.SinglePlacementGroup, s.MaxNodes, s.Zones)
		}
	}
}

func TestVMSizeFacts(t *testing.T) {
	for size, want := range map[string]Capacity{
		"Standard_E16ds_v5":        {CPUs: 16, MemoryGiB: 128, LocalDiskGiB: 600},
		"Standard_E96ds_v5":        {CPUs: 96, MemoryGiB: 672, LocalDiskGiB: 3600},
		"Standard_L8s_v3":          {CPUs: 8, MemoryGiB: 64, LocalDiskGiB: 1788},
		"Standard_DS15_v2":         {CPUs: 20, MemoryGiB: 140, LocalDiskGiB: 280},
		"Standard_D16s_v5":         {CPUs: 16, MemoryGiB: 64},
		"Standard_ND96isr_H100_v5": {CPUs: 96, MemoryGiB: 1900, LocalDiskGiB: 3576, GPUs: 8, InfiniBand: true, NVSwitch: true},
		"Standard_NC24ads_A100_v4": {CPUs: 24, MemoryGiB: 220, LocalDiskGiB: 958, GPUs: 1},
	} {
		if got, ok := VMCapacity(size); !ok || got != want {
			t.Errorf("VMCapacity(%s) = %+v, %v; want %+v", size, got, ok, want)
		}
	}
	if _, ok := VMCapacity("Standard_D16ds_v99"); ok {
		t.Error("a size that is not in the table has facts")
	}
}

// The reservation follows AKS's published table: kubeReserved CPU by cores, memory by max pods.
func TestNodeReservationFollowsAKS(t *testing.T) {
	for cores, want := range map[int]int64{1: 60, 2: 100, 4: 140, 8: 180, 16: 260, 32: 420, 64: 740} {
		if got := NodeReservation(Capacity{CPUs: cores}, 30).KubeCPUMilli; got != want {
			t.Errorf("%d cores: kubeReserved cpu %dm, AKS reserves %dm", cores, got, want)
		}
	}
	if got := NodeReservation(Capacity{CPUs: 4}, 30).KubeMemory; got != 650<<20 {
		t.Errorf("30 pods: kubeReserved memory %d MiB, AKS reserves 650 MiB", got>>20)
	}
	cpu, mem := Allocatable(Capacity{CPUs: 4, MemoryGiB: 16}, 30)
	if cpu != 4000-140-100 || mem != 16<<30-650<<20-500<<20-750<<20 {
		t.Errorf("allocatable of 4 cores, 16 GiB, 30 pods: %dm, %d MiB", cpu, mem>>20)
	}
}

// Default downloads are the most whose peak fits one NAT gateway's SNAT ports for the whole fleet
// (Azure: 64,512 per public IP, 16 IPs), up to 10, however many images a node pulls at once (the
// transfer service's limit is the node's). Each VNet has its own gateway; TestLimitUsesAtTheLimit
// refuses one whose nodes' peak passes it.
func TestDownloadsFitTheNATGateway(t *testing.T) {
	const ports = 16 * 64512
	for _, nodes := range []int{10, 2500, 7500, 10000, 20000} {
		c := &Cluster{Name: "cf-egress", Pools: []Pool{{Name: "cpu", VMSize: "Standard_D16ds_v5", Nodes: nodes}}}
		c.Default()
		p, d := c.Kubelet.MaxParallelImagePulls, c.Kubelet.MaxConcurrentDownloads
		if p != 10 || nodes*(d+16) > ports || d < 10 && nodes*(d+1+16) <= ports {
			t.Errorf("%d nodes: %d parallel pulls, %d downloads; the gateway holds %d ports", nodes, p, d, ports)
		}
		if want := (nodes*(d+16) + 64511) / 64512; c.NATPublicIPs(nodes) != want {
			t.Errorf("%d nodes: %d NAT public IPs, want %d", nodes, c.NATPublicIPs(nodes), want)
		}
	}
}
