package spec

import "fmt"

// Egress: nodes and pods reach registries and object stores through the spoke's NAT gateway,
// whose public IPs each give SNATPortsPerPublicIP ports, MaxNATPublicIPs at most. Ports that run out fail
// new connections: pulls stall (L23) exactly when the whole fleet pulls a new image (L26).
// egressBaseConnections are a node's outbound flows through the gateway besides image pulls:
// the agents' to Azure's services (the kubelet's and etcd's stay in the VNet). A workload's own
// internet traffic is its to budget.
const egressBaseConnections = 16

// EgressPortsPerNode is one node's outbound connections at its peak: every parallel image pull
// (L20) downloading at containerd's full layer concurrency (L24), plus the base. HTTP/2 may share a
// connection between layers; the budget does not count on it.
func (c *Cluster) EgressPortsPerNode() int {
	return c.Kubelet.MaxParallelImagePulls*c.Kubelet.MaxConcurrentDownloads + egressBaseConnections
}

// NATPublicIPs is how many public IPs the NAT gateway needs for every node at its peak at once.
func (c *Cluster) NATPublicIPs() int {
	ports := int64(max(c.TargetNodes, 1)) * int64(c.EgressPortsPerNode())
	return int(max(1, (ports+SNATPortsPerPublicIP-1)/SNATPortsPerPublicIP))
}

// parallelPullsWithinSNAT is the default kubelet.maxParallelImagePulls: DefaultMaxParallelImagePulls,
// or fewer where the fleet's pulls would outrun the NAT gateway's ports.
func parallelPullsWithinSNAT(nodes, downloads int) int {
	perNode := MaxNATPublicIPs * SNATPortsPerPublicIP / max(nodes, 1)
	return min(DefaultMaxParallelImagePulls, max(1, (perNode-egressBaseConnections)/max(downloads, 1)))
}

// validateEgress refuses a fleet whose pulls at their peak need more SNAT ports than a NAT gateway has.
func (c *Cluster) validateEgress(v *validator) {
	if ips := c.NATPublicIPs(); ips > MaxNATPublicIPs {
		v.fail("kubelet.maxParallelImagePulls", fmt.Sprintf("lower kubelet.maxParallelImagePulls to %d or kubelet.maxConcurrentDownloads, or leave them unset to size them from targetNodes",
			parallelPullsWithinSNAT(c.TargetNodes, c.Kubelet.MaxConcurrentDownloads)),
			"%d nodes × (%d pulls × %d downloads + %d) need %d SNAT ports; a NAT gateway has %d public IPs × %d",
			c.TargetNodes, c.Kubelet.MaxParallelImagePulls, c.Kubelet.MaxConcurrentDownloads, egressBaseConnections,
			int64(c.TargetNodes)*int64(c.EgressPortsPerNode()), MaxNATPublicIPs, SNATPortsPerPublicIP)
	}
}
