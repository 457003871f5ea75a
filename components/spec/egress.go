package spec

// Egress: nodes and pods reach registries and object stores through their VNet's NAT gateway,
// whose public IPs each give SNATPortsPerPublicIP ports, MaxNATPublicIPs at most. Ports that run out fail
// new connections: pulls stall (L23) exactly when the whole fleet pulls a new image (L26).
// egressBaseConnections are a node's outbound flows through the gateway besides image pulls:
// the agents' to Azure's services (the kubelet's and etcd's stay in the VNet). A workload's own
// internet traffic is its to budget.
const egressBaseConnections = 16

// EgressPortsPerNode is one node's outbound connections at its peak: containerd 2's transfer
// service holds one download limit for all of a node's pulls (L24), however many the kubelet runs
// at once (L20), plus the base. HTTP/2 may share a connection between layers; the budget does not
// count on it.
func (c *Cluster) EgressPortsPerNode() int {
	return c.Kubelet.MaxConcurrentDownloads + egressBaseConnections
}

// NATPublicIPs is how many public IPs a NAT gateway needs for nodes nodes at their peak at once.
// Each VNet has its own gateway (one cannot span VNets): the control plane's, and each worker VNet's.
func (c *Cluster) NATPublicIPs(nodes int) int {
	ports := int64(max(nodes, 1)) * int64(c.EgressPortsPerNode())
	return int(max(1, (ports+SNATPortsPerPublicIP-1)/SNATPortsPerPublicIP))
}

// downloadsWithinSNAT is the default kubelet.maxConcurrentDownloads: DefaultMaxConcurrentDownloads,
// or fewer where the whole fleet's downloads would outrun one NAT gateway's ports.
func downloadsWithinSNAT(nodes int) int {
	perNode := MaxNATPublicIPs * SNATPortsPerPublicIP / max(nodes, 1)
	return min(DefaultMaxConcurrentDownloads, max(1, perNode-egressBaseConnections))
}
