package rehearsal

import (
	"fmt"
	"net/netip"
	"regexp"
	"slices"

	"github.com/clusterforge/clusterforge/components/addons"
	"github.com/clusterforge/clusterforge/components/machine"
	"github.com/clusterforge/clusterforge/components/pki"
	"github.com/clusterforge/clusterforge/components/spec"
)

// Deviation is one way the rehearsal differs from what an Azure machine runs. Every difference
// is listed here and implemented in this file; `rehearse` prints the list.
type Deviation struct {
	Topic     string
	Azure     string
	Rehearsal string
}

// Deviations lists every difference from Azure, in the order they are applied.
var Deviations = []Deviation{
	{"addresses", "control-plane and etcd subnets of the spoke VNet; apiserver VMs get addresses from Azure",
		"the control-plane subnet maps to 127.<base>.1.0/24 and the etcd subnet to 127.<base>.2.0/24, keeping each address's offset; apiserver i is .20+i"},
	{"localhost", "each VM has its own 127.0.0.1 and binds 0.0.0.0",
		"all machines share one loopback, so a machine's 127.0.0.1 and 0.0.0.0 (flags and kubeconfigs) become its own address"},
	{"pki", "certificates from the Pulumi TLS provider, in state",
		"a set from the same profiles, kept in build/rehearse/<env>/identity.json until `rehearse clean`; the apiserver certificate also names each apiserver's address (its mapped 127.0.0.1)"},
	{"identity", "clusterforge-identity.service reads NODE_NAME and NODE_IP from the instance metadata service",
		"the rehearsal writes the same node.env; the unit is not run"},
	{"etcd disk", "etcd-disk.service formats and mounts the local SSD at the data dir",
		"the data dir is a plain directory under the machine root; wiping the disk deletes it; the unit is not run"},
	{"backup store", "a storage account reached through a private endpoint; the agent authenticates with the etcd VM's managed identity",
		"Azurite (Microsoft's emulator, pinned) on 127.0.0.1:10000+<base> with its development account; the etcd-main machines get AZURE_STORAGE_CONNECTION_STRING, which the agent prefers to the managed identity; its data in build/rehearse/<env>/store outlives `rehearse down` and goes with `rehearse clean`"},
	{"machine stop", "stopping a VM keeps its local disk; deallocating, resizing or redeploying it wipes the disk",
		"`rehearse down` stops every process and keeps the etcd data dirs and the PKI (identity.json, as Pulumi state keeps it), so the next `rehearse up` of the same stack is the same cluster; drills wipe a data dir to stand for a deallocation; `rehearse clean` deletes everything"},
	{"endpoint reconciler", "--endpoint-reconciler-type=lease publishes each apiserver in the kubernetes Endpoints",
		"--endpoint-reconciler-type=none: Endpoints may not hold loopback addresses"},
	{"filesystem", "files at their absolute paths, written by cloud-init as root",
		"every absolute path (files, flags, scripts) is placed under build/rehearse/<env>/machines/<machine>/"},
	{"systemd", "systemd runs the units: Restart=on-failure, LimitNOFILE, one host name per VM",
		"the rehearsal runs the units' ExecStart in unit order; oneshots retry every RestartSec; a stopped service stays stopped until a drill restarts it; all processes share this host's name and limits"},
	{"workers", "VMSS instances running kubelet and containerd",
		"KWOK nodes with the pools' labels, taints and VM capacity, at most --nodes-per-pool per pool; the end-to-end check adds one real node booted from the baked image"},
	{"worker boot", "systemd boots the baked image; cloud-init writes the worker's rendered files; the local SSD is /dev/disk/azure/resource",
		"the image's root in a mount namespace of its own, the rendered files written into it, the units' ExecStart run in order, a Type=notify unit (containerd) waited for until it reports READY=1 as systemd does, no restarts; a loop device over a sparse file is the local SSD"},
	{"worker cgroups", "systemd is PID 1: the kubelet's cgroupDriver and containerd's SystemdCgroup are systemd",
		"no systemd here: both use cgroupfs"},
	{"worker kernel", "the image's sysctls are applied at boot, so protectKernelDefaults holds; containerd may lower oom_score_adj",
		"this host's kernel settings are not the image's and a test must not change them: protectKernelDefaults false; containerd restrict_oom_score_adj (no CAP_SYS_RESOURCE)"},
	{"worker network", "Azure CNI gives pods the NIC's secondary IPs",
		"a loopback-only CNI network, which keeps the node Ready: containerd sets up no pod network with it, so pods run here only with hostNetwork; the node's address is 127.<base>.3.10, which the kubelet does not publish (loopback)"},
	{"add-ons", "the Pulumi program registers every add-on object through pulumi-kubernetes; cluster-autoscaler's cloud config names the subscription and the system pool's identity",
		"the same objects, server-side applied: the foundation (join RBAC and token, the scheduler's CRDs) as soon as the API answers (as `pulumi up` applies them first among the add-ons), the rest by `rehearse up` and the checks; the cloud config names placeholder ids; add-on pods are KWOK pods, so nothing in them runs, except the PodGroup controller: its pinned binary runs as a process with its service account's token"},
}

// Placeholder Azure ids of the rehearsal's cluster-autoscaler cloud config (deviation "add-ons").
const (
	rehearsalSubscriptionID = "00000000-0000-0000-0000-000000000000"
	rehearsalClientID       = "11111111-1111-1111-1111-111111111111"
)

// Addons are every add-on object with the rehearsal's cloud config (deviation "add-ons").
func (p *Plan) Addons() ([]addons.Object, error) {
	objs, err := addons.Objects(p.Cluster)
	if err != nil {
		return nil, err
	}
	secret, err := addons.AutoscalerCloudConfig(p.Cluster, rehearsalSubscriptionID, rehearsalClientID)
	if err != nil {
		return nil, err
	}
	return append(objs, secret), nil
}

// bakedNodeEdits change rendered files of a worker booted here (deviations "worker cgroups" and
// "worker kernel"); each must find its text.
var bakedNodeEdits = []struct{ path, old, new string }{
	{machine.KubeletConfigPath, "cgroupDriver: systemd\n", "cgroupDriver: cgroupfs\n"},
	{machine.KubeletConfigPath, "protectKernelDefaults: true\n", "protectKernelDefaults: false\n"},
	{machine.ContainerdConfigPath, "SystemdCgroup = true\n", "SystemdCgroup = false\n"},
	{machine.ContainerdConfigPath, "[plugins.\"io.containerd.grpc.v1.cri\"]\n", "[plugins.\"io.containerd.grpc.v1.cri\"]\n  restrict_oom_score_adj = true\n"},
}

// loopbackCNI is the worker's network (deviation "worker network").
const loopbackCNI = `{"cniVersion": "1.0.0", "name": "rehearsal-loopback", "plugins": [{"type": "loopback"}]}
`

// workerIP is the baked worker's address (deviation "worker network").
func workerIP(base int) string { return fmt.Sprintf("127.%d.3.10", base) }

// loopbackNetwork returns the cluster with its control-plane and etcd subnets moved onto
// 127.<base>.1.0/24 and 127.<base>.2.0/24 (deviation "addresses"). Offsets inside each subnet
// stay, so etcd member i and the load balancer frontend keep their rendered positions.
func loopbackNetwork(c *spec.Cluster, base int) (*spec.Cluster, error) {
	out := *c
	cp, err := netip.ParsePrefix(c.Network.ControlPlaneSubnet)
	if err != nil {
		return nil, err
	}
	lbIP, err := netip.ParseAddr(c.Network.APIServerIP)
	if err != nil {
		return nil, err
	}
	offset := int64(u32(lbIP)) - int64(u32(cp.Masked().Addr()))
	if offset < 0 || offset >= apiserverMachineOffset {
		return nil, fmt.Errorf("rehearsal: network.apiServerIP %s sits at offset %d of the control-plane subnet; the rehearsal needs it below %d", lbIP, offset, apiserverMachineOffset)
	}
	out.Network.ControlPlaneSubnet = fmt.Sprintf("127.%d.1.0/24", base)
	out.Network.EtcdSubnet = fmt.Sprintf("127.%d.2.0/24", base)
	out.Network.APIServerIP = fmt.Sprintf("127.%d.1.%d", base, offset)
	return &out, nil
}

func u32(a netip.Addr) uint32 {
	b := a.As4()
	return uint32(b[0])<<24 | uint32(b[1])<<16 | uint32(b[2])<<8 | uint32(b[3])
}

// apiserverMachineOffset is where apiserver machines start in the mapped control-plane subnet.
const apiserverMachineOffset = 20

func apiserverMachineIP(base, i int) string {
	return fmt.Sprintf("127.%d.1.%d", base, apiserverMachineOffset+i)
}

// rehearsalProfiles are the cluster's certificate profiles; the apiserver's also names every
// apiserver machine address, since components dial their machine's mapped 127.0.0.1 (deviation "pki").
func rehearsalProfiles(c *spec.Cluster, apiserverIPs []string) []pki.Profile {
	profiles := pki.Profiles(c)
	for i := range profiles {
		if profiles[i].Name == pki.APIServer {
			profiles[i].IPAddresses = append(slices.Clone(profiles[i].IPAddresses), apiserverIPs...)
		}
	}
	return profiles
}

// localAddress matches 127.0.0.1 and 0.0.0.0 as whole addresses, not inside 10.0.0.0/8.
var localAddress = regexp.MustCompile(`(^|[^0-9.])(127\.0\.0\.1|0\.0\.0\.0)([^0-9.]|$)`)

// ownLoopback replaces a machine's 127.0.0.1 and 0.0.0.0 with its own address (deviation "localhost").
func ownLoopback(s, ip string) string {
	return localAddress.ReplaceAllString(s, "${1}"+ip+"${3}")
}

// skippedUnits are rendered units the rehearsal does not run (deviations "identity" and "etcd disk").
var skippedUnits = map[string]string{
	"clusterforge-identity.service": "the rehearsal writes node.env",
	"etcd-disk.service":             "no local SSD; the data dir is a plain directory",
}

// flagOverrides change rendered flag values, per unit (deviation "endpoint reconciler").
var flagOverrides = map[string]map[string]string{
	"kube-apiserver.service": {"endpoint-reconciler-type": "none"},
}

// identityEnv is what clusterforge-identity.service would write to machine.NodeEnvFile.
func identityEnv(name, ip string) string {
	return fmt.Sprintf("NODE_NAME=%s\nNODE_IP=%s\n", name, ip)
}
