// Package framework is what the end-to-end packages share: the fixtures their scenarios run on
// (etcd's tests/framework/e2e is the model). A process-rehearsal package's TestMain calls Main,
// which brings up one rehearsal of -stack (shaped by -topology) for the package's scenarios, on a
// loopback base of its own, and takes it down after them; package booted's calls BootMain, which
// boots -stack's machines from their images (booted.go). Under -short neither comes up and the
// scenarios skip.
package framework

import (
	"context"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/clusterforge/clusterforge/components/addons"
	"github.com/clusterforge/clusterforge/components/spec"
	"github.com/clusterforge/clusterforge/test/machines"
	"github.com/clusterforge/clusterforge/test/machines/processes"
)

var (
	stackName    = flag.String("stack", "dev", "stack to rehearse or boot: stacks/Pulumi.<stack>.yaml (booted: with its images baked, make images-local)")
	nodesPerPool = flag.Int("nodes-per-pool", 3, "KWOK nodes per pool")
	topology     = flag.String("topology", processes.TopologyHA, fmt.Sprintf("shape of the shared rehearsal: %q (the stack's own machines) or %q (one member of each role, each role capped at its cores; root)", processes.TopologyHA, processes.TopologyCapacity))
)

// What Main gives the package's scenarios.
var (
	// Cluster is the stack as loaded, before the rehearsal's or the boot's deviations.
	Cluster *spec.Cluster
	// Running is the package's shared rehearsal; nil under -short or without Options.Shared.
	Running *processes.Rehearsal
	// RepoRoot is the repository's root directory.
	RepoRoot string
)

// Loopback bases (127.<base>.x.x) of the rehearsals the end-to-end packages start, one each, so
// none collides with another or with `make rehearse` (base 0).
const (
	BaseShared     = 1
	BaseQuotaDrill = 2
	BaseRolls      = 3
	BaseScaleSmoke = 4
	BaseBackups    = 5
)

// Options says what rehearsal a package's scenarios share.
type Options struct {
	// Name names the rehearsal's directory: build/rehearse/<stack>-<Name>.
	Name string
	// Base is its loopback base, one of the Base constants.
	Base int
	// Shared brings the rehearsal up before the scenarios; false for packages whose drills plan
	// rehearsals of their own.
	Shared bool
}

// Main runs the package's tests, around a shared rehearsal when o asks for one, and returns the
// exit code. It first serves the stand-ins when the test binary was started as one.
func Main(m *testing.M, o Options) int {
	machines.ServeSubcommand() // the rehearsal starts its stand-ins as `<this binary> lb|imds|forward ...`
	flag.Parse()
	var err error
	if RepoRoot, err = findRepoRoot(); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	if Cluster, err = spec.LoadStack(spec.StackFile(filepath.Join(RepoRoot, spec.StackDir), *stackName)); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	if testing.Short() || !o.Shared {
		return m.Run()
	}
	p, err := newLayout(*stackName+"-"+o.Name, Cluster, o.Base, *topology)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	fmt.Fprintf(os.Stderr, "rehearsing stack %s in %s\n", *stackName, p.Dir)
	if Running, err = processes.Up(ctx, p, os.Stderr); err != nil {
		fmt.Fprintln(os.Stderr, "rehearsal did not come up:", err)
		return 1
	}
	code := m.Run()
	if err := Running.Down(); err != nil {
		fmt.Fprintln(os.Stderr, "rehearsal down:", err)
		code = 1
	}
	return code
}

// Stack is the stack the scenarios rehearse (-stack).
func Stack() string { return *stackName }

// NodesPerPool is how many KWOK nodes the rehearsals simulate per pool (-nodes-per-pool), at
// most the pool's maxNodes.
func NodesPerPool() int { return *nodesPerPool }

// NewLayout lays out a rehearsal of c in build/rehearse/<name> on loopback base, after deleting what
// an earlier run left there: each run checks a new cluster. It has the stack's own machines
// whatever -topology says, which shapes only the shared rehearsal.
func NewLayout(name string, c *spec.Cluster, base int) (*processes.Layout, error) {
	return newLayout(name, c, base, processes.TopologyHA)
}

func newLayout(name string, c *spec.Cluster, base int, topology string) (*processes.Layout, error) {
	self, err := os.Executable()
	if err != nil {
		return nil, err
	}
	tools := filepath.Join(RepoRoot, ".tools", "bin")
	if _, err := os.Stat(filepath.Join(tools, "kube-apiserver")); err != nil {
		return nil, fmt.Errorf("the pinned binaries are missing from %s: run `make tools` (or `go test -short` to skip the rehearsal)", tools)
	}
	dir := filepath.Join(RepoRoot, "build", "rehearse", name)
	if err := processes.Clean(dir, os.Stderr); err != nil {
		return nil, err
	}
	c, o, err := processes.WithTopology(c, machines.Options{
		Dir: dir, Tools: tools, Base: base,
		NodesPerPool: *nodesPerPool, Self: []string{self},
	}, topology)
	if err != nil {
		return nil, fmt.Errorf("-topology %s: %w", topology, err)
	}
	return processes.NewLayout(c, o)
}

func findRepoRoot() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return dir, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", fmt.Errorf("no go.mod above the working directory")
		}
		dir = parent
	}
}

// NeedRehearsal skips a scenario of a package with a shared rehearsal when none runs (-short).
// Packages whose drills plan their own rehearsals skip with SkipShort.
func NeedRehearsal(t testing.TB) {
	t.Helper()
	if Running == nil {
		t.Skip("-short: no rehearsal")
	}
}

// SkipShort skips a scenario under -short.
func SkipShort(t testing.TB) {
	t.Helper()
	if testing.Short() {
		t.Skip("-short: an end-to-end scenario")
	}
}

// Clientset is the admin's client of the shared rehearsal, through its load balancer.
func Clientset(t testing.TB) *kubernetes.Clientset {
	t.Helper()
	cs, err := Running.Clientset()
	if err != nil {
		t.Fatal(err)
	}
	return cs
}

// As is a client of the shared rehearsal acting as someone else, by impersonation.
func As(t testing.TB, impersonate rest.ImpersonationConfig) *kubernetes.Clientset {
	t.Helper()
	return AsIn(t, Running.Layout.Layout, impersonate)
}

// AsIn is a client of the cluster of l acting as someone else, by impersonation.
func AsIn(t testing.TB, l *machines.Layout, impersonate rest.ImpersonationConfig) *kubernetes.Clientset {
	t.Helper()
	cfg, err := l.RESTConfig()
	if err != nil {
		t.Fatal(err)
	}
	cfg.Impersonate = impersonate
	client, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return client
}

// ServiceAccount is who a service account's token is to the apiservers, to impersonate.
func ServiceAccount(namespace, name string) rest.ImpersonationConfig {
	return rest.ImpersonationConfig{UserName: addons.ServiceAccountUser(namespace, name),
		Groups: []string{"system:serviceaccounts", "system:serviceaccounts:" + namespace, "system:authenticated"}}
}

// StopAll kills a unit on several machines at once, as a VM loss would (no restart).
func StopAll(t testing.TB, ins []machines.Instance, unit string) {
	t.Helper()
	for _, in := range ins {
		if err := Running.Stop(in.Name, unit, syscall.SIGKILL); err != nil {
			t.Fatal(err)
		}
	}
}

// Ptr is v's address, for API fields that take pointers.
func Ptr[T any](v T) *T { return &v }
