package wellknown

// Paths on a worker that its image, its kubelet and the node agent share.
const (
	ContainerdState      = "/run/containerd"
	ContainerdSocketPath = ContainerdState + "/containerd.sock"
	// ContainerdEndpoint is the socket as the kubelet and crictl name it.
	ContainerdEndpoint = "unix://" + ContainerdSocketPath
	// CNIResultsDir is where containerd's CNI library caches each pod's network setup (libcni's
	// cacheAdd), until the pod's network is torn down: the traffic counters read the pods there.
	CNIResultsDir = "/var/lib/cni/results"
)

// IMDSAddress is Azure's instance metadata service, on every VM: the identity script, the node
// agent and the metadata guard (which keeps pods away from it) name it.
const IMDSAddress = "169.254.169.254"

// ClusterDomain is the cluster's DNS domain: the kubelet's clusterDomain, CoreDNS's zone, and
// the suffix of every in-cluster service name a certificate carries.
const ClusterDomain = "cluster.local"
