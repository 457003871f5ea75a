package processes

import (
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"

	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/client-go/rest"

	"github.com/clusterforge/clusterforge/components/capacity"
	"github.com/clusterforge/clusterforge/components/machine"
	"github.com/clusterforge/clusterforge/components/pki"
	"github.com/clusterforge/clusterforge/components/spec"
	"github.com/clusterforge/clusterforge/test/etcdprobe"
	"github.com/clusterforge/clusterforge/test/machines"
	"github.com/clusterforge/clusterforge/test/scale"
)

// scaleLoadUser is who the scale benchmark's load generator acts as: an ordinary user, whose
// requests priority and fairness classes as global-default.
const scaleLoadUser = "clusterforge:scale-load"

// APIServerProcess is the apiserver's process as the rehearsal names it: its unit without the
// suffix, and its log logs/<machine>.<APIServerProcess>.log.
var APIServerProcess = strings.TrimSuffix(machine.APIServerUnit, ".service")

// scaleCluster is the running rehearsal as the scale benchmark drives it (scale.Cluster): its
// nodes are KWOK nodes of the first pool without GPUs or taints, where teams run.
type scaleCluster struct {
	r    *Rehearsal
	pool int
}

var _ scale.Cluster = (*scaleCluster)(nil)

// ScaleCluster grants the load generator its access and returns the rehearsal as the scale
// benchmark's cluster.
func (r *Rehearsal) ScaleCluster(ctx context.Context) (scale.Cluster, error) {
	pool := -1
	for i, p := range r.Cluster.Pools {
		if c, ok := spec.VMCapacity(p.VMSize); ok && c.GPUs == 0 && len(machine.NodeTaints(p)) == 0 {
			pool = i
			break
		}
	}
	if pool < 0 {
		return nil, errors.New("scale benchmark: the stack has no pool without GPUs and taints (the system pool's among them) to simulate nodes in")
	}
	access := userAccess(scaleLoadUser,
		rbacv1.PolicyRule{APIGroups: []string{""}, Resources: []string{"namespaces"}, Verbs: []string{"get", "create"}},
		rbacv1.PolicyRule{APIGroups: []string{""}, Resources: []string{"pods", "nodes"}, Verbs: []string{"get", "list", "watch", "create", "delete"}},
		rbacv1.PolicyRule{APIGroups: []string{"apps"}, Resources: []string{"deployments"}, Verbs: []string{"get", "create", "update"}},
		// The restart storm's mutating probe.
		rbacv1.PolicyRule{APIGroups: []string{""}, Resources: []string{"configmaps"}, Verbs: []string{"create", "delete", "list", "deletecollection"}},
	)
	if err := r.Apply(ctx, access...); err != nil {
		return nil, err
	}
	return &scaleCluster{r: r, pool: pool}, nil
}

func (s *scaleCluster) NodeConfig() (*rest.Config, error) { return s.r.KWOKRESTConfig() }
func (s *scaleCluster) LoadConfig() (*rest.Config, error) { return s.r.RESTConfigAs(scaleLoadUser, "") }
func (s *scaleCluster) Node(n int) (corev1.Node, error)   { return s.r.PoolNode(s.pool, n) }

// StartProbe runs the write probe beside the first main etcd member as the apiserver's etcd
// client, with the pair and authorities the rehearsal keeps for that client.
func (s *scaleCluster) StartProbe(path string) (func() error, error) {
	member := s.r.Of(spec.RoleEtcdMain)[0]
	argv := append(slices.Clone(s.r.Self), etcdprobe.Command, "--endpoint="+machines.EtcdClientURL(member),
		"--cacert="+s.r.PKIFile(pki.EtcdServersCA, "crt"), "--cert="+s.r.PKIFile(pki.APIServerEtcdClient, "crt"), "--key="+s.r.PKIFile(pki.APIServerEtcdClient, "key"),
		"--out="+path)
	log := s.r.Log(member.Name, etcdprobe.Command)
	proc, err := machines.StartProcess(argv, os.Environ(), s.r.Dir, log)
	if err != nil {
		return nil, err
	}
	stop := func() error {
		if err := proc.Stop(syscall.SIGTERM, 10*time.Second); err != nil {
			return err
		}
		if proc.Failed() {
			return fmt.Errorf("%s: %v (log: %s)", etcdprobe.Command, proc.Err(), log)
		}
		return nil
	}
	err = machines.Poll(context.Background(), 30*time.Second, etcdprobe.Command, func(context.Context) error {
		if !proc.Alive() {
			return machines.Permanent{Err: fmt.Errorf("exited: %v (log: %s)", proc.Err(), log)}
		}
		_, err := os.Stat(path)
		return err
	})
	if err != nil {
		return nil, errors.Join(err, stop())
	}
	return stop, nil
}

// Targets are every apiserver (as the admin) and every etcd member (as the apiserver's etcd client).
func (s *scaleCluster) Targets() ([]scale.Target, error) {
	api, err := s.r.HTTPClient()
	if err != nil {
		return nil, err
	}
	tc, err := s.r.TLSConfig(pki.APIServerEtcdClient, pki.EtcdServerCAs(s.r.Cluster)...)
	if err != nil {
		return nil, err
	}
	etcd := &http.Client{Timeout: api.Timeout, Transport: &http.Transport{TLSClientConfig: tc, DialContext: s.r.Dial}}
	var out []scale.Target
	for _, p := range s.r.Procs() {
		switch p.Name {
		case APIServerProcess:
			out = append(out, scale.Target{Name: p.Machine, Kind: scale.KindAPIServer, URL: p.URL, Client: api})
		case "etcd":
			out = append(out, scale.Target{Name: p.Machine, Kind: p.Role, URL: p.URL, Client: etcd})
		}
	}
	return out, nil
}

// Processes are every process the rehearsal runs and this one, which generates the load.
func (s *scaleCluster) Processes() []scale.Process {
	out := []scale.Process{{Component: "benchmark (load)", Name: "this process", PID: os.Getpid()}}
	for _, p := range s.r.Procs() {
		component := p.Name
		switch p.Name {
		case "etcd":
			component = p.Role
		case APIServerProcess:
			component = scale.KindAPIServer
		}
		role := "" // the stand-ins, KWOK and the add-ons' controller run on no control-plane machine
		if _, err := s.r.Instance(p.Machine); err == nil {
			role = p.Role
		}
		out = append(out, scale.Process{Component: component, Name: p.Machine + "/" + p.Name, PID: p.PID, Role: role})
	}
	return out
}

// SplitEvents restarts every apiserver with or without the events override and waits until the
// API is healthy again.
func (s *scaleCluster) SplitEvents(ctx context.Context, split bool) error {
	if s.r.EventsInMainEtcd == !split {
		return nil
	}
	if _, _, err := s.restartAPIServers(ctx, func() { s.r.EventsInMainEtcd = !split }); err != nil {
		return err
	}
	return s.r.WaitAPIHealthy(ctx)
}

// RestartAPIServers stops every apiserver at once and starts them all again, without waiting.
func (s *scaleCluster) RestartAPIServers(ctx context.Context) (time.Time, []scale.Process, error) {
	return s.restartAPIServers(ctx, func() {})
}

// restartAPIServers stops every apiserver (SIGTERM, each waited for), calls between, starts them
// all again and returns when the last had stopped and the new processes.
func (s *scaleCluster) restartAPIServers(ctx context.Context, between func()) (time.Time, []scale.Process, error) {
	apiservers := s.r.Of(spec.RoleAPIServer)
	each := func(f func(name string) error) error {
		errs := make([]error, len(apiservers))
		var wg sync.WaitGroup
		for i, in := range apiservers {
			wg.Add(1)
			go func() { defer wg.Done(); errs[i] = f(in.Name) }()
		}
		wg.Wait()
		return errors.Join(errs...)
	}
	if err := each(func(name string) error { return s.r.Stop(name, APIServerProcess, syscall.SIGTERM) }); err != nil {
		return time.Time{}, nil, err
	}
	down := time.Now()
	between()
	if err := each(func(name string) error { return s.r.Boot(ctx, name) }); err != nil {
		return down, nil, err
	}
	var out []scale.Process
	for _, in := range apiservers {
		if p := s.r.Proc(in.Name, APIServerProcess); p != nil {
			out = append(out, scale.Process{Component: scale.KindAPIServer, Name: in.Name + "/" + APIServerProcess, PID: p.PID, Role: spec.RoleAPIServer})
		}
	}
	return down, out, nil
}

// The scale benchmark's control-plane shapes.
const (
	// TopologyCapacity is one machine of each control-plane role, rendered from the stack (its
	// tier's flags), each role's processes capped at its CapacityCPU: what one machine of a role
	// costs, without every member of a role sharing the same two cores.
	TopologyCapacity = capacity.Topology
	// TopologyHA is the stack's own machines on the shared cores: a fidelity run of the HA shape.
	TopologyHA = "ha"
)

// CapacityCPU is each role's cores in the capacity topology, sized for a two-core machine: the
// apiserver with its controller-manager and scheduler most, the main etcd half a core, the events
// etcd a quarter; KWOK, the load generator and the stand-ins share what is left.
var CapacityCPU = map[string]float64{spec.RoleAPIServer: 0.75, spec.RoleEtcdMain: 0.5, spec.RoleEtcdEvents: 0.25}

// CapacityFsyncLatency is each etcd member's disk flush in the capacity topology, each on a disk
// stand-in of its own: a local NVMe SSD's (etcd's disk, L02), rounded up.
const CapacityFsyncLatency = time.Millisecond

// oneOfEachRole is the cluster with one apiserver and one member of each etcd, every other
// setting the stack's.
func oneOfEachRole(c *spec.Cluster) *spec.Cluster {
	one := *c
	one.APIServer.Count, one.EtcdMain.Members, one.EtcdEvents.Members = 1, 1, 1
	return &one
}

// WithTopology shapes a rehearsal of c as topology: the capacity topology is one member of each
// role, each role capped at CapacityCPU (a role in o.CPULimits keeps its own) and each etcd member
// on a disk stand-in of CapacityFsyncLatency unless o gives one; the ha topology is c and o as they are.
func WithTopology(c *spec.Cluster, o machines.Options, topology string) (*spec.Cluster, machines.Options, error) {
	switch topology {
	case TopologyCapacity:
		if os.Geteuid() != 0 {
			return nil, o, errors.New("the capacity topology caps each role by a cgroup of its own: run it as root")
		}
		c = oneOfEachRole(c)
		limits := maps.Clone(CapacityCPU)
		maps.Copy(limits, o.CPULimits)
		o.CPULimits = limits
		if o.EtcdFsyncLatency == 0 {
			o.EtcdFsyncLatency = CapacityFsyncLatency
		}
	case TopologyHA:
	default:
		return nil, o, fmt.Errorf("topology %q is neither %q nor %q", topology, TopologyCapacity, TopologyHA)
	}
	return c, o, nil
}

// BenchScale runs the scale benchmark on a rehearsal of its own in o.Dir, of the given topology,
// started clean and stopped at the end.
func BenchScale(ctx context.Context, c *spec.Cluster, stack, topology string, o machines.Options, bench scale.Options, progress io.Writer) (scale.Summary, error) {
	c, o, err := WithTopology(c, o, topology)
	if err != nil {
		return scale.Summary{}, fmt.Errorf("scale benchmark: %w", err)
	}
	bench.Topology, bench.CPULimits, bench.EtcdFsyncLatency = topology, o.CPULimits, o.EtcdFsyncLatency
	var s scale.Summary
	err = onBenchRehearsal(ctx, c, o, progress, func(sc scale.Cluster) (err error) {
		bench.PodImage = c.Versions.PauseImage
		fmt.Fprintf(progress, "==> scale benchmark on %s (%s topology): steps %v, warm-up %s, hold %s; reports in %s\n", stack, topology, bench.Steps, bench.WarmUp, bench.Hold, filepath.Clean(bench.Out))
		s, err = scale.Run(ctx, sc, stack, bench, progress)
		return err
	})
	return s, err
}

// BenchJoins runs the joins benchmark (scale.Joins) on a rehearsal of its own in o.Dir, with the
// stack's join plan.
func BenchJoins(ctx context.Context, c *spec.Cluster, o machines.Options, bench scale.JoinOptions, progress io.Writer) (scale.JoinReport, error) {
	var rep scale.JoinReport
	err := onBenchRehearsal(ctx, c, o, progress, func(sc scale.Cluster) (err error) {
		bench.PodImage = c.Versions.PauseImage
		fmt.Fprintf(progress, "==> joins benchmark: %d nodes, %d rounds; stepper %d nodes a step, pause %s, jitter %s; reports in %s\n",
			bench.Nodes, bench.Rounds, bench.Pace.Step, bench.Pace.Pause, bench.Jitter, filepath.Clean(bench.Out))
		rep, err = scale.Joins(ctx, sc, bench, progress)
		return err
	})
	return rep, err
}

// onBenchRehearsal starts a clean rehearsal in o.Dir, runs bench on it and stops it.
func onBenchRehearsal(ctx context.Context, c *spec.Cluster, o machines.Options, progress io.Writer, bench func(scale.Cluster) error) error {
	if err := Clean(o.Dir, progress); err != nil {
		return err
	}
	p, err := NewLayout(c, o)
	if err != nil {
		return err
	}
	r, err := Up(ctx, p, progress)
	if err != nil {
		return err
	}
	defer func() {
		if err := r.Down(); err != nil {
			fmt.Fprintf(progress, "==> stopping the rehearsal: %v\n", err)
		}
	}()
	sc, err := r.ScaleCluster(ctx)
	if err != nil {
		return err
	}
	return bench(sc)
}
