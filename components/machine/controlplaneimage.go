package machine

import "github.com/clusterforge/clusterforge/components/spec"

// Image roles: which image the Packer plugin bakes (its `role` option) and which machines boot it.
const (
	ImageWorker       = "worker"
	ImageControlPlane = "control-plane"
)

// ImageRoles are every image the plugin bakes.
var ImageRoles = []string{ImageWorker, ImageControlPlane}

// ImageBinaries are the pinned binaries each image installs in BinDir; the units of the roles it
// serves run nothing else from there (a test reads the rendered units to keep this true).
var ImageBinaries = map[string][]string{
	ImageWorker: {"containerd", "containerd-shim-runc-v2", "ctr", "runc", "crictl", "kubelet", "kube-proxy", "azure-npm", "clusterforge-node-join"},
	// kube-scheduler places gangs whole (L16); kubectl is the operator's tool on the machine.
	ImageControlPlane: {"etcd", "etcdctl", "etcdutl", "kube-apiserver", "kube-controller-manager", "kube-scheduler",
		"kubectl", "clusterforge-etcd-backup", "clusterforge-csr-approver"},
}

// ImageOf is the image a machine role boots.
func ImageOf(role string) string {
	switch role {
	case spec.RoleEtcdMain, spec.RoleEtcdEvents, spec.RoleAPIServer:
		return ImageControlPlane
	}
	return ImageWorker
}

// ControlPlaneSysctls are the etcd and apiserver machines' kernel settings, each with its reason.
const ControlPlaneSysctls = `# clusterforge control-plane sysctls: one reason each.
# After an apiserver restart every kubelet and watch reconnects at once (10,000+ nodes): the
# default accept and SYN queues drop them and retries pile up (L09).
net.core.somaxconn = 32768
net.ipv4.tcp_max_syn_backlog = 32768
# A hung etcd member or apiserver is worse than one that reboots and rejoins.
kernel.panic = 10
kernel.panic_on_oops = 1
`

// ControlPlaneImage is everything the etcd and apiserver machines' image carries besides its
// binaries: the local-disk names the etcd-disk unit looks for (L28) and the kernel settings.
// The units themselves come with each machine's user-data.
func ControlPlaneImage() Machine {
	m := Machine{Role: "control-plane-image"}
	m.add(azureDiskNames)
	m.add(part{files: []File{{Path: SysctlPath, Content: ControlPlaneSysctls, Mode: 0o644}}})
	return m
}
