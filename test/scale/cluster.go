package scale

import (
	"context"
	"net/http"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/rest"

	"github.com/clusterforge/clusterforge/components/spec"
)

// Cluster is a running control plane as the benchmark drives it; the rehearsal is one
// (processes.Rehearsal.ScaleCluster).
type Cluster interface {
	// NodeConfig is a client as the nodes' agents are (the identity KWOK acts as, in
	// system:nodes); LoadConfig is the load generator's, an ordinary user. Neither is exempt from
	// priority and fairness.
	NodeConfig() (*rest.Config, error)
	LoadConfig() (*rest.Config, error)
	// Node is the n-th simulated worker node as its kubelet registers it, with its capacity.
	Node(n int) (corev1.Node, error)
	// Targets are the /metrics endpoints of every apiserver and every etcd member.
	Targets() ([]Target, error)
	// Processes are the cluster's processes, whose CPU and memory each step reports.
	Processes() []Process
	// StartProbe starts the main etcd's write probe (etcdprobe.Main) in a process of its own
	// beside the first main etcd member, appending its samples to path, and returns once it
	// writes; stop ends it, with the error it failed with if it did.
	StartProbe(path string) (stop func() error, err error)
	// SplitEvents restarts the apiservers with Events in their own etcd, as rendered (true), or in
	// the main etcd (false), and returns when the API is ready again.
	SplitEvents(ctx context.Context, split bool) error
	// RestartAPIServers stops every apiserver at once, starts them all again without waiting for
	// them, and returns when the last had stopped and the new processes.
	RestartAPIServers(ctx context.Context) (down time.Time, restarted []Process, err error)
}

// Target kinds.
const (
	KindAPIServer  = spec.RoleAPIServer
	KindEtcdMain   = spec.RoleEtcdMain
	KindEtcdEvents = spec.RoleEtcdEvents
)

// Target is one /metrics endpoint.
type Target struct {
	// Name is the machine; Kind is KindAPIServer or an etcd role.
	Name, Kind string
	URL        string
	Client     *http.Client
}

// Process is one process of the cluster.
type Process struct {
	// Component groups processes in the reports: a server's Target kind (KindAPIServer,
	// KindEtcdMain, KindEtcdEvents), else its program ("kube-scheduler", "kwok"...).
	Component string
	// Name is the machine and unit, for people.
	Name string
	PID  int
	// Role is the control-plane role of the machine it runs on; empty for the benchmark's own
	// processes (KWOK, the load, the stand-ins).
	Role string
}
