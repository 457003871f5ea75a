// Package procfs reads what the tests and benchmarks measure of a process from Linux's /proc:
// its CPU time, resident memory and peak, its name and state, and its cgroup's CPU limit.
package procfs

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// clockTicks is the kernel's USER_HZ, the unit of /proc/<pid>/stat's CPU times: 100 on every
// Linux architecture Go supports.
const clockTicks = 100

// Sample is a process's CPU time so far and its resident memory, read at one moment.
type Sample struct {
	At time.Time
	// Comm is the process's name, State its one-letter state (R running, S sleeping, D in I/O...).
	Comm, State string
	CPU         time.Duration
	RSSBytes    int64
}

// Read reads a process's CPU time (user and system) and resident set from /proc.
func Read(pid int) (Sample, error) {
	stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return Sample{}, err
	}
	// The command name, field 2, is in parentheses and may hold spaces: count fields after it.
	open, i := strings.IndexByte(string(stat), '('), strings.LastIndexByte(string(stat), ')')
	if open < 0 || i < open {
		return Sample{}, fmt.Errorf("/proc/%d/stat: no command name", pid)
	}
	fields := strings.Fields(string(stat[i+1:]))
	// Field 3 (state) is the first after the name; 14 and 15 (utime, stime) the 12th and 13th;
	// 24 (rss, in pages) the 22nd.
	if len(fields) < 22 {
		return Sample{}, fmt.Errorf("/proc/%d/stat: %d fields after the name", pid, len(fields))
	}
	var ticks [2]int64
	for j, f := range fields[11:13] {
		if ticks[j], err = strconv.ParseInt(f, 10, 64); err != nil {
			return Sample{}, fmt.Errorf("/proc/%d/stat: %w", pid, err)
		}
	}
	pages, err := strconv.ParseInt(fields[21], 10, 64)
	if err != nil {
		return Sample{}, fmt.Errorf("/proc/%d/stat: %w", pid, err)
	}
	return Sample{At: time.Now(), Comm: string(stat[open+1 : i]), State: fields[0],
		CPU: time.Duration(ticks[0]+ticks[1]) * time.Second / clockTicks, RSSBytes: pages * int64(os.Getpagesize())}, nil
}

// PeakRSS is a process's highest resident memory so far (VmHWM), in bytes; 0 if unreadable.
func PeakRSS(pid int) int64 {
	status, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0
	}
	for _, line := range strings.Split(string(status), "\n") {
		if v, ok := strings.CutPrefix(line, "VmHWM:"); ok {
			kib, _ := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
			return kib << 10
		}
	}
	return 0
}

// PIDs are every process's ID.
func PIDs() []int {
	dirs, _ := filepath.Glob("/proc/[0-9]*")
	out := make([]int, 0, len(dirs))
	for _, d := range dirs {
		if pid, err := strconv.Atoi(filepath.Base(d)); err == nil {
			out = append(out, pid)
		}
	}
	return out
}

// SelfCPU is this process's CPU time by getrusage: the kernel's other account of what Read reads.
func SelfCPU() (time.Duration, error) {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0, err
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano()), nil
}

// Cgroups are a process's cgroup paths by hierarchy, as /proc/<pid>/cgroup lists them: each v1
// hierarchy by its controllers ("cpu", "cpu,cpuacct", "name=systemd"), the v2 one by "".
func Cgroups(pid int) (map[string]string, error) {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/cgroup", pid))
	if err != nil {
		return nil, err
	}
	out := map[string]string{}
	for _, line := range strings.Split(strings.TrimSpace(string(data)), "\n") {
		if parts := strings.SplitN(line, ":", 3); len(parts) == 3 {
			out[parts[1]] = parts[2]
		}
	}
	return out, nil
}

// CPULimit is the cores a process's cgroup v1 CPU controller lets it use (its quota over its
// period), and false when its cgroup sets none.
func CPULimit(pid int) (float64, bool) {
	dir, ok := cpuCgroup(pid)
	if !ok {
		return 0, false
	}
	quota, err1 := readInt(filepath.Join(dir, "cpu.cfs_quota_us"))
	period, err2 := readInt(filepath.Join(dir, "cpu.cfs_period_us"))
	if err1 != nil || err2 != nil || quota < 0 || period <= 0 {
		return 0, false
	}
	return float64(quota) / float64(period), true
}

// Throttling is how many of its quota's periods a process's CPU cgroup has run (nr_periods) and
// been throttled in (nr_throttled), so far; false when it has no quota to be throttled by.
func Throttling(pid int) (periods, throttled int64, ok bool) {
	dir, ok := cpuCgroup(pid)
	if !ok {
		return 0, 0, false
	}
	data, err := os.ReadFile(filepath.Join(dir, "cpu.stat"))
	if err != nil {
		return 0, 0, false
	}
	for _, line := range strings.Split(string(data), "\n") {
		if v, found := strings.CutPrefix(line, "nr_periods "); found {
			periods, _ = strconv.ParseInt(v, 10, 64)
		}
		if v, found := strings.CutPrefix(line, "nr_throttled "); found {
			throttled, _ = strconv.ParseInt(v, 10, 64)
		}
	}
	return periods, throttled, periods > 0
}

// cpuCgroup is the directory of a process's cgroup in the v1 CPU controller's hierarchy.
func cpuCgroup(pid int) (string, bool) {
	cgroups, err := Cgroups(pid)
	if err != nil {
		return "", false
	}
	for hierarchy, path := range cgroups {
		if slices.Contains(strings.Split(hierarchy, ","), "cpu") {
			return filepath.Join("/sys/fs/cgroup", hierarchy, path), true
		}
	}
	return "", false
}

func readInt(path string) (int64, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return 0, err
	}
	return strconv.ParseInt(strings.TrimSpace(string(data)), 10, 64)
}
