package rehearsal_test

import (
	"context"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/clusterforge/clusterforge/components/spec"
	"github.com/clusterforge/clusterforge/test/rehearsal"
)

// The checks run against one rehearsal of -stack, brought up once for the package. Loopback
// base 1 keeps them apart from a `make rehearse` (base 0) running alongside.
var (
	stackName    = flag.String("stack", "dev", "stack to rehearse: stacks/Pulumi.<stack>.yaml")
	nodesPerPool = flag.Int("nodes-per-pool", 3, "KWOK nodes per pool")
)

const (
	checkBase = 1
	drillBase = 2
)

var (
	cluster  *spec.Cluster // the stack as loaded, before the rehearsal's deviations
	running  *rehearsal.Rehearsal
	repoRoot string
)

func TestMain(m *testing.M) {
	// The rehearsal starts its load balancer as `<this binary> lb ...`.
	rehearsal.ServeSubcommand()
	flag.Parse()
	if testing.Short() {
		os.Exit(m.Run())
	}
	os.Exit(withRehearsal(m))
}

func withRehearsal(m *testing.M) int {
	var err error
	if repoRoot, err = findRepoRoot(); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	if cluster, err = spec.LoadStack(spec.StackFile(filepath.Join(repoRoot, spec.StackDir), *stackName)); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	p, err := newPlan(*stackName+"-check", cluster, checkBase)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	fmt.Fprintf(os.Stderr, "rehearsing stack %s in %s\n", *stackName, p.Dir)
	if running, err = rehearsal.Up(ctx, p, os.Stderr); err != nil {
		fmt.Fprintln(os.Stderr, "rehearsal did not come up:", err)
		return 1
	}
	code := m.Run()
	if err := running.Down(); err != nil {
		fmt.Fprintln(os.Stderr, "rehearsal down:", err)
		code = 1
	}
	return code
}

// newPlan plans a rehearsal of c in build/rehearse/<name> on loopback base.
func newPlan(name string, c *spec.Cluster, base int) (*rehearsal.Plan, error) {
	self, err := os.Executable()
	if err != nil {
		return nil, err
	}
	tools := filepath.Join(repoRoot, ".tools", "bin")
	if _, err := os.Stat(filepath.Join(tools, "kube-apiserver")); err != nil {
		return nil, fmt.Errorf("the pinned binaries are missing from %s: run `make tools` (or `go test -short` to skip the rehearsal)", tools)
	}
	dir := filepath.Join(repoRoot, "build", "rehearse", name)
	if err := rehearsal.Clean(dir, os.Stderr); err != nil { // each run checks a new cluster
		return nil, err
	}
	return rehearsal.NewPlan(c, rehearsal.Options{
		Dir: dir, Tools: tools, Base: base,
		NodesPerPool: *nodesPerPool, Self: []string{self},
	})
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

// needRehearsal skips checks under -short, where no rehearsal runs.
func needRehearsal(t testing.TB) {
	t.Helper()
	if running == nil {
		t.Skip("-short: no rehearsal")
	}
}
