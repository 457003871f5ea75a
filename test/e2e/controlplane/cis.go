package controlplane

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/clusterforge/clusterforge/components/spec"
	"github.com/clusterforge/clusterforge/test/e2e/framework"
)

// The CIS benchmark passes, except for the checks docs/reference/cis-exceptions.md lists with their reasons; a listed
// exception that now passes must leave the list.
func CISBenchmark(t *testing.T) {
	framework.NeedRehearsal(t)
	// kube-bench reads the flags of the component processes in this PID namespace (booted machines
	// have their own).
	pidNamespace := strconv.Itoa(os.Getpid())
	if out, _ := exec.Command("pgrep", "-c", "-x", "--ns", pidNamespace, "--nslist", "pid", "kube-apiserver").Output(); strings.TrimSpace(string(out)) != strconv.Itoa(len(framework.Running.Of(spec.RoleAPIServer))) {
		t.Fatalf("%s kube-apiserver processes run in this PID namespace, %d of them ours: kube-bench would read another's flags; stop other rehearsals (make rehearse-down)",
			strings.TrimSpace(string(out)), len(framework.Running.Of(spec.RoleAPIServer)))
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	results, err := framework.Running.CIS(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(results) < 50 {
		t.Fatalf("kube-bench ran %d checks; the master and etcd targets have more", len(results))
	}
	exceptions := readExceptions(t)
	flagged := map[string]bool{}
	for _, r := range results {
		if r.Status == "FAIL" || r.Status == "WARN" {
			flagged[r.ID] = true
			if _, ok := exceptions[r.ID]; !ok {
				t.Errorf("CIS %s %s: %s, and %s lists no exception for it (report: %s)", r.ID, r.Status, r.Text, cisExceptionsFile, filepath.Join(framework.Running.Dir, "cis.txt"))
			}
		}
	}
	for id := range exceptions {
		if !flagged[id] {
			t.Errorf("%s lists CIS %s as an exception, but it passes now: remove it", cisExceptionsFile, id)
		}
	}
}

var exceptionRow = regexp.MustCompile("^\\| `?([0-9.]+)`? \\|")

// cisExceptionsFile holds the accepted exceptions, each with its reason.
const cisExceptionsFile = "docs/reference/cis-exceptions.md"

// readExceptions reads the accepted exceptions table.
func readExceptions(t *testing.T) map[string]string {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(framework.RepoRoot, cisExceptionsFile))
	if err != nil {
		t.Fatal(err)
	}
	_, table, ok := strings.Cut(string(data), "<!-- cis-exceptions:start -->")
	table, _, ok2 := strings.Cut(table, "<!-- cis-exceptions:end -->")
	if !ok || !ok2 {
		t.Fatalf("%s has no <!-- cis-exceptions:start/end --> table", cisExceptionsFile)
	}
	out := map[string]string{}
	for _, line := range strings.Split(table, "\n") {
		if m := exceptionRow.FindStringSubmatch(line); m != nil {
			out[m[1]] = line
		}
	}
	return out
}
