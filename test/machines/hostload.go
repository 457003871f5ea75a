package machines

import (
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"time"
)

// BusiestProcesses samples every process's CPU time over window and lists the top n, each with
// its state and cgroup (which names the machine it runs in), so that a stalled run says what
// held the host's cores rather than only how loaded they were.
func BusiestProcesses(window time.Duration, n int) string {
	before := cpuTicks()
	time.Sleep(window)
	after := cpuTicks()
	type busy struct {
		pid   int
		ticks uint64
		proc  procStat
	}
	var top []busy
	for pid, a := range after {
		if b, ok := before[pid]; ok && a.ticks > b.ticks {
			top = append(top, busy{pid, a.ticks - b.ticks, a})
		}
	}
	sort.Slice(top, func(i, j int) bool { return top[i].ticks > top[j].ticks })
	load, _ := os.ReadFile("/proc/loadavg")
	var out strings.Builder
	fmt.Fprintf(&out, "this host: load %s; busiest processes over %s (%% of one core):", strings.TrimSpace(string(load)), window)
	const ticksPerSecond = 100 // USER_HZ on Linux
	for _, t := range top[:min(n, len(top))] {
		fmt.Fprintf(&out, "\n  %5.0f%% %7d %s %-16s %s", float64(t.ticks)/ticksPerSecond/window.Seconds()*100,
			t.pid, t.proc.state, t.proc.comm, cgroupOf(t.pid))
	}
	return out.String()
}

type procStat struct {
	comm, state string
	ticks       uint64 // utime + stime
}

func cpuTicks() map[int]procStat {
	stats, _ := filepath.Glob("/proc/[0-9]*/stat")
	out := make(map[int]procStat, len(stats))
	for _, path := range stats {
		pid, err := strconv.Atoi(filepath.Base(filepath.Dir(path)))
		data, rerr := os.ReadFile(path)
		if err != nil || rerr != nil {
			continue
		}
		// comm is in parentheses and may hold spaces; the fields after it are fixed.
		text := string(data)
		open, close := strings.IndexByte(text, '('), strings.LastIndexByte(text, ')')
		if open < 0 || close < open {
			continue
		}
		fields := strings.Fields(text[close+1:])
		if len(fields) < 13 {
			continue
		}
		utime, _ := strconv.ParseUint(fields[11], 10, 64)
		stime, _ := strconv.ParseUint(fields[12], 10, 64)
		out[pid] = procStat{comm: text[open+1 : close], state: fields[0], ticks: utime + stime}
	}
	return out
}

// cgroupOf is a process's systemd cgroup path: on a cgroup v1 host the name=systemd hierarchy,
// on v2 the unified one.
func cgroupOf(pid int) string {
	data, _ := os.ReadFile(fmt.Sprintf("/proc/%d/cgroup", pid))
	path := ""
	for _, line := range strings.Split(string(data), "\n") {
		if _, p, ok := strings.Cut(line, "name=systemd:"); ok {
			return p
		}
		if p, ok := strings.CutPrefix(line, "0::"); ok {
			path = p
		}
	}
	return path
}
