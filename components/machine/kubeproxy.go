package machine

// kube-proxy runs on every worker as a unit beside the kubelet, from the same pinned Kubernetes
// build, with the node's own rotating client certificate (the kubelet's kubeconfig): no DaemonSet,
// no image to pull, no service-account token on the node. addons binds system:node-proxier to the
// nodes' group.
//
// Mode nftables: at 10,000 nodes the Service rules change constantly (every pod start moves an
// endpoint). iptables mode matches a packet against chains that grow with every Service and
// endpoint and rewrites them with iptables-restore; nftables mode looks Services and endpoints up
// in maps (one lookup whatever their number) and applies only what changed. IPVS mode is in
// maintenance upstream and still needs iptables for masquerading.
const (
	KubeProxyConfigPath = KubeDir + "/kube-proxy.yaml"
	kubeProxyUnit       = "kube-proxy"
)

// kubeProxyConfig is the KubeProxyConfiguration. Local pods are told by their veth's name
// (PodInterfacePrefix): pod IPs share the node subnet with the nodes, so no CIDR says "pod".
// conntrack's table size is left to the kernel's setting (maxPerCore 0): the image's sysctls own it.
var kubeProxyConfig = `apiVersion: kubeproxy.config.k8s.io/v1alpha1
kind: KubeProxyConfiguration
clientConnection:
  kubeconfig: ` + KubeletKubeconfig + `
mode: nftables
detectLocalMode: InterfaceNamePrefix
detectLocal:
  interfaceNamePrefix: ` + PodInterfacePrefix + `
conntrack:
  maxPerCore: 0
`

// kubeProxy starts once the kubelet runs, with the kubelet's kubeconfig, which
// clusterforge-node-join wrote before the kubelet started.
func kubeProxy() part {
	return part{
		files: []File{{Path: KubeProxyConfigPath, Content: kubeProxyConfig, Mode: 0o644}},
		units: []Unit{service{
			name: kubeProxyUnit, description: "Kubernetes Service proxy (nftables)",
			after: []string{identityUnit, KubeletUnit}, requires: []string{identityUnit}, binary: BinDir + "/kube-proxy",
			flags: Flags{"config": KubeProxyConfigPath, "hostname-override": "${NODE_NAME}"}, envFiles: []string{NodeEnvFile},
		}.unit()},
	}
}
