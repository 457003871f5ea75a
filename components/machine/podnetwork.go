package machine

import (
	"encoding/json"
	"fmt"
	"strings"

	"github.com/clusterforge/clusterforge/components/wellknown"
)

// The pod network (L29, L30): Azure CNI v1 in transparent mode. azure-vnet-ipam hands each pod one
// of the NIC's secondary IP configurations, so pod IPs are VNet addresses the platform routes with
// no overlay; azure-vnet gives the pod a veth whose host side (azv…) has a /32 route and proxy ARP,
// and the pod's default route points at that host side. Nothing in the conflist depends on the
// machine, so it is baked into the worker image.
const (
	AzureCNIConfPath = CNIConfDir + "/10-azure.conflist"
	// PodInterfacePrefix starts the host side of every pod's veth (azure-vnet names them azv…):
	// kube-proxy tells traffic from local pods by it.
	PodInterfacePrefix = "azv"
	// IPAMInterfacesPath is what azure-vnet-ipam reads when its source is IPAMFromFile.
	IPAMInterfacesPath = KubeDir + "/interfaces.json"
)

// Where azure-vnet-ipam learns the NIC's secondary IPs.
const (
	// IPAMFromWireserver asks the platform (the wireserver's NMAgent interface list), as on Azure.
	IPAMFromWireserver = "azure"
	// IPAMFromFile reads IPAMInterfacesPath: the rehearsal's VNet stand-in writes it.
	IPAMFromFile = "fileIpam"
)

// AzureCNIConflist is the CNI network containerd sets every pod up with. No portmap plugin:
// hostPort is not offered (training pods reach each other by pod IP; node agents use hostNetwork).
func AzureCNIConflist(ipamSource string) string {
	ipam := map[string]string{"type": "azure-vnet-ipam"}
	if ipamSource != IPAMFromWireserver {
		ipam["environment"] = ipamSource
	}
	out, err := json.MarshalIndent(map[string]any{
		"cniVersion": "0.3.0",
		"name":       "azure",
		"plugins":    []any{map[string]any{"type": "azure-vnet", "mode": "transparent", "ipam": ipam}},
	}, "", "  ")
	if err != nil {
		panic(err) // maps of strings always encode
	}
	return string(out) + "\n"
}

// CNIPlugins are the plugin binaries the worker image installs in CNIBinDir: Azure CNI's, and
// loopback, which containerd's CRI runs to bring up each pod's lo.
var CNIPlugins = []string{"azure-vnet", "azure-vnet-ipam", "loopback"}

// Metadata endpoints closed to pods: a pod that reached the instance metadata service could take
// the node's managed-identity tokens, and the wireserver's agent ports hand out the VM's settings.
// The host and hostNetwork pods keep them (their packets are not forwarded); Azure DNS on the
// wireserver's port 53 stays open, since CoreDNS forwards to it.
const (
	WireserverAddress = "168.63.129.16"
	MetadataGuardPath = "/etc/clusterforge/metadata-guard.nft"
	MetadataGuardUnit = "clusterforge-metadata-guard.service"
)

// wireserverAgentPorts are the wireserver's HTTP ports (the guest agent and the host plugin).
var wireserverAgentPorts = []int{80, 32526}

// metadataGuard is the nftables ruleset: forwarded packets to either endpoint are rejected, so a
// pod sees its connection refused at once rather than a timeout.
func metadataGuard() string {
	ports := make([]string, len(wireserverAgentPorts))
	for i, p := range wireserverAgentPorts {
		ports[i] = fmt.Sprint(p)
	}
	return `# clusterforge: pods may not reach the instance metadata service or the wireserver's agent ports.
table inet clusterforge_metadata_guard
delete table inet clusterforge_metadata_guard
table inet clusterforge_metadata_guard {
	chain forward {
		type filter hook forward priority filter - 10; policy accept;
		ip daddr ` + wellknown.IMDSAddress + ` meta l4proto tcp counter reject with tcp reset
		ip daddr ` + wellknown.IMDSAddress + ` counter reject with icmpx admin-prohibited
		ip daddr ` + WireserverAddress + ` tcp dport { ` + strings.Join(ports, ", ") + ` } counter reject with tcp reset
	}
}
`
}

// metadataGuardUnit loads the ruleset before containerd starts any pod; containerd requires it.
var metadataGuardUnit = `[Unit]
Description=clusterforge: close the instance metadata service and the wireserver to pods
DefaultDependencies=no
Wants=network-pre.target
Before=network-pre.target ` + ContainerdUnit + `

[Service]
Type=oneshot
RemainAfterExit=yes
ExecStart=/usr/sbin/nft -f ` + MetadataGuardPath + `

[Install]
WantedBy=multi-user.target
RequiredBy=` + ContainerdUnit + `
`

// podNetwork is the pod network's part of the worker image.
func podNetwork() part {
	return part{
		files: []File{
			{Path: AzureCNIConfPath, Content: AzureCNIConflist(IPAMFromWireserver), Mode: 0o644},
			{Path: MetadataGuardPath, Content: metadataGuard(), Mode: 0o644},
		},
		units: []Unit{{Name: MetadataGuardUnit, Enable: true, Content: metadataGuardUnit}},
	}
}
