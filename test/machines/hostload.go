package machines

import (
	"fmt"
	"os"
	"sort"
	"strings"
	"time"

	"github.com/clusterforge/clusterforge/test/procfs"
)

// BusiestProcesses samples every process's CPU time over window and lists the top n, each with
// its state and cgroup (which names the machine it runs in), so that a stalled run says what
// held the host's cores rather than only how loaded they were.
func BusiestProcesses(window time.Duration, n int) string {
	before := cpuTimes()
	time.Sleep(window)
	after := cpuTimes()
	type busy struct {
		pid int
		cpu time.Duration
		s   procfs.Sample
	}
	var top []busy
	for pid, a := range after {
		if b, ok := before[pid]; ok && a.CPU > b.CPU {
			top = append(top, busy{pid, a.CPU - b.CPU, a})
		}
	}
	sort.Slice(top, func(i, j int) bool { return top[i].cpu > top[j].cpu })
	load, _ := os.ReadFile("/proc/loadavg")
	var out strings.Builder
	fmt.Fprintf(&out, "this host: load %s; busiest processes over %s (%% of one core):", strings.TrimSpace(string(load)), window)
	for _, t := range top[:min(n, len(top))] {
		fmt.Fprintf(&out, "\n  %5.0f%% %7d %s %-16s %s", t.cpu.Seconds()/window.Seconds()*100, t.pid, t.s.State, t.s.Comm, cgroupOf(t.pid))
	}
	return out.String()
}

func cpuTimes() map[int]procfs.Sample {
	out := map[int]procfs.Sample{}
	for _, pid := range procfs.PIDs() {
		if s, err := procfs.Read(pid); err == nil {
			out[pid] = s
		}
	}
	return out
}

// cgroupOf is a process's systemd cgroup path: on a cgroup v1 host the name=systemd hierarchy,
// on v2 the unified one.
func cgroupOf(pid int) string {
	cgroups, _ := procfs.Cgroups(pid)
	if p, ok := cgroups["name=systemd"]; ok {
		return p
	}
	return cgroups[""]
}
