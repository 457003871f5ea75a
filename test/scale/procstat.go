package scale

import (
	"slices"
	"strings"

	"github.com/clusterforge/clusterforge/test/procfs"
)

// Usage is one component's resource use over a hold.
type Usage struct {
	Component string `json:"component"`
	// Role is its processes' machines' (Process.Role).
	Role string `json:"role,omitempty"`
	// Processes counts the component's processes.
	Processes int `json:"processes"`
	// CPUCores is the mean CPU use over the hold, in cores, summed over the processes.
	CPUCores float64 `json:"cpuCores"`
	// RSSBytes is the resident memory at the end of the hold, summed; PeakRSSBytes the highest sum
	// seen at any sample.
	RSSBytes     int64 `json:"rssBytes"`
	PeakRSSBytes int64 `json:"peakRssBytes"`
	// CPULimitCores is the cap of the cgroup its processes are in, as the kernel enforces it: its
	// role's, shared with the role's other components (RolesAtCap); 0 when uncapped.
	CPULimitCores float64 `json:"cpuLimitCores,omitempty"`
	// ThrottledShare is the share of that cgroup's quota periods in the window in which the
	// kernel throttled it: a role can be throttled in bursts while its mean is below its cap.
	ThrottledShare float64 `json:"throttledShare,omitempty"`
}

// UsageMeter samples the cluster's processes over a hold.
type UsageMeter struct {
	procs []Process
	first map[int]procfs.Sample
	last  map[int]procfs.Sample
	peak  map[string]int64
	// firstThrottle and lastThrottle are each capped process's cgroup's periods and throttled
	// periods.
	firstThrottle, lastThrottle map[int][2]int64
}

// NewUsageMeter starts measuring procs now.
func NewUsageMeter(procs []Process) *UsageMeter {
	u := &UsageMeter{procs: procs, first: map[int]procfs.Sample{}, last: map[int]procfs.Sample{}, peak: map[string]int64{},
		firstThrottle: map[int][2]int64{}, lastThrottle: map[int][2]int64{}}
	u.Sample()
	for pid, s := range u.last {
		u.first[pid] = s
	}
	for pid, t := range u.lastThrottle {
		u.firstThrottle[pid] = t
	}
	return u
}

// Sample reads every process once; a process that has exited keeps its last reading.
func (u *UsageMeter) Sample() {
	rss := map[string]int64{}
	read := map[int]bool{} // a process listed twice is read once, so the peak sums what Usage sums
	for _, p := range u.procs {
		s, seen := u.last[p.PID], read[p.PID]
		if !seen {
			var err error
			if s, err = procfs.Read(p.PID); err != nil {
				continue
			}
			u.last[p.PID], read[p.PID] = s, true
			if periods, throttled, ok := procfs.Throttling(p.PID); ok {
				u.lastThrottle[p.PID] = [2]int64{periods, throttled}
			}
		}
		rss[p.Component] += s.RSSBytes
	}
	for c, v := range rss {
		u.peak[c] = max(u.peak[c], v)
	}
}

// Usage is each component's use from the meter's start to its last sample, by component name.
func (u *UsageMeter) Usage() []Usage {
	by := map[string]*Usage{}
	for _, p := range u.procs {
		first, ok1 := u.first[p.PID]
		last, ok2 := u.last[p.PID]
		if !ok1 || !ok2 {
			continue
		}
		c := by[p.Component]
		if c == nil {
			c = &Usage{Component: p.Component, Role: p.Role, PeakRSSBytes: u.peak[p.Component]}
			by[p.Component] = c
		}
		c.Processes++
		if wall := last.At.Sub(first.At); wall > 0 {
			c.CPUCores += (last.CPU - first.CPU).Seconds() / wall.Seconds()
		}
		c.RSSBytes += last.RSSBytes
		if cores, ok := procfs.CPULimit(p.PID); ok {
			c.CPULimitCores = max(c.CPULimitCores, cores)
		}
		t0, ok1 := u.firstThrottle[p.PID]
		t1, ok2 := u.lastThrottle[p.PID]
		if periods := t1[0] - t0[0]; ok1 && ok2 && periods > 0 {
			c.ThrottledShare = max(c.ThrottledShare, float64(t1[1]-t0[1])/float64(periods))
		}
	}
	var out []Usage
	for _, c := range by {
		out = append(out, *c)
	}
	slices.SortFunc(out, func(a, b Usage) int { return strings.Compare(a.Component, b.Component) })
	return out
}
