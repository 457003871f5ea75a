package machines

import (
	"errors"
	"fmt"
	"maps"
	"math"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"github.com/clusterforge/clusterforge/test/procfs"
)

// MakeCgroups makes <hierarchy>/<this process's path>/<path...> in every mounted hierarchy and
// returns their directories. A new cpuset gets its parent's CPUs and memory nodes: empty, it
// takes no process.
func MakeCgroups(path ...string) ([]string, error) {
	var dirs []string
	err := ForEachCgroupHierarchy(func(dir string) error {
		leaf := filepath.Join(append([]string{dir}, path...)...)
		if err := os.MkdirAll(leaf, 0o755); err != nil {
			return err
		}
		for _, f := range []string{"cpuset.cpus", "cpuset.mems"} {
			var made []string
			for d := leaf; d != dir; d = filepath.Dir(d) {
				made = append([]string{d}, made...)
			}
			for _, d := range made {
				if v, err := os.ReadFile(filepath.Join(filepath.Dir(d), f)); err == nil {
					if err := os.WriteFile(filepath.Join(d, f), v, 0o644); err != nil {
						return err
					}
				}
			}
		}
		dirs = append(dirs, leaf)
		return nil
	})
	return dirs, err
}

// InCgroups is argv run by a shell that first moves itself into dirs, so that the process and
// all it starts are in them from its first instruction; the shell then becomes argv (same PID).
func InCgroups(dirs, argv []string) []string {
	wrapped := append([]string{"sh", "-c", `while [ "$1" != -- ]; do echo $$ >"$1/cgroup.procs" || exit 1; shift; done; shift; exec "$@"`, "sh"}, dirs...)
	return append(append(wrapped, "--"), argv...)
}

// cfsPeriod is the CPU controller's accounting period; a quota of n periods is n cores.
const cfsPeriod = 100 * time.Millisecond

// LimitCPU caps the processes of the cgroups (MakeCgroups' dirs) at cores of CPU time, by the
// cgroup v1 CPU controller's quota: the controllers this machine and CI mount (the booted machines
// need them too, deviation "machine cgroups").
func LimitCPU(dirs []string, cores float64) error {
	period := cfsPeriod.Microseconds()
	quota := int64(math.Round(cores * float64(period)))
	for _, d := range dirs {
		if _, err := os.Stat(filepath.Join(d, "cpu.cfs_quota_us")); err == nil {
			if err := os.WriteFile(filepath.Join(d, "cpu.cfs_period_us"), []byte(strconv.FormatInt(period, 10)), 0o644); err != nil {
				return err
			}
			return os.WriteFile(filepath.Join(d, "cpu.cfs_quota_us"), []byte(strconv.FormatInt(quota, 10)), 0o644)
		}
	}
	return errors.New("no cgroup v1 CPU controller holds these cgroups: the CPU limit cannot be set")
}

// RemoveCgroups removes <hierarchy>/<this process's path>/<top> and all below it, deepest first,
// once their processes are gone.
func RemoveCgroups(top string) error {
	return ForEachCgroupHierarchy(func(dir string) error {
		root := filepath.Join(dir, top)
		var dirs []string
		_ = filepath.WalkDir(root, func(path string, d os.DirEntry, err error) error {
			if err == nil && d.IsDir() {
				dirs = append(dirs, path)
			}
			return nil
		})
		sort.Slice(dirs, func(i, j int) bool { return len(dirs[i]) > len(dirs[j]) })
		var last error
		for _, d := range dirs {
			for range 50 { // the kernel frees a cgroup shortly after its last process exits
				if last = unix.Rmdir(d); last == nil || errors.Is(last, unix.ENOENT) {
					last = nil
					break
				}
				time.Sleep(100 * time.Millisecond)
			}
			if last != nil {
				return fmt.Errorf("remove cgroup %s: %w", d, last)
			}
		}
		return nil
	})
}

// ForEachCgroupHierarchy calls f with this process's cgroup directory in every mounted hierarchy.
func ForEachCgroupHierarchy(f func(dir string) error) error {
	cgroups, err := procfs.Cgroups(os.Getpid())
	if err != nil {
		return err
	}
	for _, hierarchy := range slices.Sorted(maps.Keys(cgroups)) {
		mount := "/sys/fs/cgroup/" + strings.TrimPrefix(hierarchy, "name=")
		if hierarchy == "" {
			mount = "/sys/fs/cgroup/unified"
		}
		if _, err := os.Stat(mount); err != nil {
			continue
		}
		if err := f(filepath.Join(mount, cgroups[hierarchy])); err != nil {
			return err
		}
	}
	return nil
}
