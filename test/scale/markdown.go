package scale

import (
	"fmt"
	"maps"
	"math"
	"slices"
	"strings"
)

// Markdown is report.md: the headline, a row per step, the storm's runs and what saturated.
func Markdown(s Summary, steps []Step, storm StormReport, restarts []RestartReport) string {
	var b strings.Builder
	fmt.Fprintf(&b, "# Scale benchmark: stack %s\n\n", s.Stack)
	fmt.Fprintf(&b, "Machine: %s. Started %s, took %s.\n\n", s.Machine, s.Started.UTC().Format("2006-01-02 15:04 UTC"), s.Took)
	fmt.Fprintf(&b, "Topology: %s.\n\n", topologyText(s))
	fmt.Fprintf(&b, "**Largest node count within the SLOs: %d.**", s.LargestPassingNodes)
	if s.FirstFailingStep > 0 {
		fmt.Fprintf(&b, " The first failing step, %d nodes, missed: %s.", s.FirstFailingStep, strings.Join(s.FirstFailing, "; "))
	}
	if len(s.HarnessLimitedSteps) > 0 {
		fmt.Fprintf(&b, " Harness-limited (a load delivered short of %.0f %% of its offer; neither passed nor failed): %v.", HarnessShare*100, s.HarnessLimitedSteps)
	}
	b.WriteString("\n\n")
	if len(storm.Runs) > 0 {
		fmt.Fprintf(&b, "**Event storm (%d nodes, %.0f events/s over %d namespaces), main etcd write probe p99 storm ÷ quiet:** split %s, unsplit %s (target ≤ %.1f split). Calibration: %s.\n\n",
			s.StormNodes, s.StormEventsPerSecond, StormNamespaces, RatioText(s.StormRatio["split"]), RatioText(s.StormRatio["unsplit"]), StormRatioTarget, storm.Note)
	}
	for _, r := range restarts {
		b.WriteString(restartLine(r) + "\n\n")
	}
	if line := Saturation(s.Machine, steps); line != "" {
		b.WriteString(line + "\n\n")
	}

	b.WriteString("| nodes | result | set-up | not-ready taints (hold start → end) | mutating p99 | read resource p99 | read namespace p99 | read cluster p99 | pod start-up p99 | requests/s | 429 | 5xx | lease writes/s (expected) | node status writes/s (expected) | CPU cores used | etcd-main DB |\n")
	b.WriteString("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|\n")
	for _, st := range steps {
		result := st.Result()
		if !st.Passed() {
			result = "**" + result + "**"
		}
		fmt.Fprintf(&b, "| %d | %s | %.0f s | %d → %d |", st.Nodes, result, st.SetupSeconds, st.TaintedNodes[0], st.TaintedNodes[1])
		for _, class := range Classes {
			if v, ok := worstP99(st, class); ok {
				fmt.Fprintf(&b, " %s |", seconds(v))
			} else {
				b.WriteString(" - |")
			}
		}
		cpu, dbSize := 0.0, 0.0
		for _, u := range st.Usage {
			cpu += u.CPUCores
		}
		for _, e := range st.Etcd {
			if e.Role == KindEtcdMain {
				dbSize = math.Max(dbSize, e.DBSizeBytes)
			}
		}
		fmt.Fprintf(&b, " %s | %.0f | %.0f | %.0f | %.0f (%d) | %.1f (%.1f) | %.2f | %.0f MiB |\n", seconds(st.PodStartup.P99Seconds),
			st.APIServers.Requests/math.Max(1, st.HeldSeconds), st.APIServers.Throttled, st.APIServers.Failed, st.LeaseWrites, st.Nodes/int(NodeLeaseRenewal.Seconds()),
			st.NodeStatusWrites, st.offered(NodeStatus), cpu, dbSize/(1<<20))
	}
	b.WriteString("\n| nodes | load | offered/s | delivered/s | share |\n|---|---|---|---|---|\n")
	for _, st := range steps {
		for _, d := range st.Loads {
			share := fmt.Sprintf("%.0f %%", 100*d.Delivered/math.Max(d.Offered, 1e-9))
			if d.Short() {
				share = "**" + share + "**"
			}
			fmt.Fprintf(&b, "| %d | %s | %.2f | %.2f | %s |\n", st.Nodes, d.Load, d.Offered, d.Delivered, share)
		}
	}
	b.WriteString(costTable(s.Costs, s.LeasesOnly))
	b.WriteString("\nEach step: the nodes registered, a base pod on each (none in the lease-only run), a warm-up discarded, then the hold judged. p99 by clusterloader2's method (the 99th percentile of per-minute p99s of `apiserver_request_sli_duration_seconds`, worst call of the class); pod start-up from creation to Running on the client's watch.\n\n")

	b.WriteString(stormTable(storm))
	b.WriteString("\nCharts: `slo.svg`, `cpu.svg`, `memory.svg`, `etcd-size.svg`, `storm.svg`, `restart.svg`.\n")
	return b.String()
}

// stormTable is a row per storm run; none when the run had no storm (the lease-only run).
func stormTable(storm StormReport) string {
	if len(storm.Runs) == 0 {
		return ""
	}
	var b strings.Builder
	b.WriteString("| storm run | quiet p99 | storm p99 | recovery p99 | probe ratio | WAL fsync ratio | commit ratio | events created/s | 429 | not sent | main etcd at quota in |\n")
	b.WriteString("|---|---|---|---|---|---|---|---|---|---|---|\n")
	for _, r := range storm.Runs {
		if len(r.Phases) != 3 {
			continue
		}
		q, st, rec := r.Phases[0], r.Phases[1], r.Phases[2]
		name := r.Name
		if r.Invalid != "" {
			name = "~~" + name + "~~ invalid: " + r.Invalid
		}
		fmt.Fprintf(&b, "| %s | %s | %s | %s | %.2f | %.2f | %.2f | %.0f of %.0f sent | %d | %d | %s |\n", name,
			seconds(q.ProbeP99), seconds(st.ProbeP99), seconds(rec.ProbeP99), r.ProbeRatio, r.FsyncRatio, r.CommitRatio, st.EventsPerSecond, st.SentPerSecond, st.Throttled, st.Unsent, hours(r.HoursToQuota))
	}
	return b.String()
}

// Saturation says which components used the machine's CPU at the last step whose hold was
// measured (a set-up that failed measured none), and whether the machine was saturated there.
func Saturation(m Machine, steps []Step) string {
	held := slices.DeleteFunc(slices.Clone(steps), func(st Step) bool { return len(st.Usage) == 0 })
	if len(held) == 0 {
		return ""
	}
	last := held[len(held)-1]
	usage := slices.Clone(last.Usage)
	slices.SortFunc(usage, func(a, b Usage) int { return int(math.Copysign(1, b.CPUCores-a.CPUCores)) })
	total := 0.0
	var parts, capped []string
	for _, u := range usage {
		total += u.CPUCores
		if len(parts) < 4 {
			parts = append(parts, fmt.Sprintf("%s %.2f", u.Component, u.CPUCores))
		}
	}
	atCap := RolesAtCap(last.Usage)
	for _, role := range slices.Sorted(maps.Keys(atCap)) {
		capped = append(capped, fmt.Sprintf("%s (%.2f of its %.2f cores)", role, atCap[role][0], atCap[role][1]))
	}
	verdict := "the CPU was not saturated"
	if total >= 0.9*float64(m.Cores) {
		verdict = "the CPU was saturated: every component competes for the same cores"
	}
	if len(capped) > 0 {
		verdict += "; at their cap: " + strings.Join(capped, ", ")
	}
	if throttled := throttledRoles(last.Usage); throttled != "" {
		verdict += "; throttled in their quota's periods: " + throttled
	}
	return fmt.Sprintf("At %d nodes (the last step measured) the processes used %.2f of %d cores, most %s; %s.",
		last.Nodes, total, m.Cores, strings.Join(parts, ", "), verdict)
}

// throttledRoles is each capped role's share of periods throttled, "" when none was.
func throttledRoles(usage []Usage) string {
	shares := map[string]float64{}
	for _, u := range usage {
		if u.Role != "" && u.ThrottledShare > 0 {
			shares[u.Role] = max(shares[u.Role], u.ThrottledShare)
		}
	}
	var out []string
	for _, role := range slices.Sorted(maps.Keys(shares)) {
		out = append(out, fmt.Sprintf("%s %.0f %%", role, 100*shares[role]))
	}
	return strings.Join(out, ", ")
}

// topologyText is the control plane's shape, each role's cores if capped, and the etcds' disks.
func topologyText(s Summary) string {
	disks := "; the etcd members share this machine's disk"
	if s.EtcdFsyncLatency != "" {
		disks = "; each etcd member on a disk of its own whose flushes take " + s.EtcdFsyncLatency
	}
	if len(s.CPULimits) == 0 {
		return s.Topology + ", every process on the machine's shared cores" + disks
	}
	var caps []string
	for _, role := range slices.Sorted(maps.Keys(s.CPULimits)) {
		caps = append(caps, fmt.Sprintf("%s %.2f", role, s.CPULimits[role]))
	}
	return fmt.Sprintf("%s, each role's processes capped at its cores (%s)%s", s.Topology, strings.Join(caps, ", "), disks)
}

// costTable is each component's CPU line over the passing steps (every measured one in the
// lease-only run).
func costTable(costs []Cost, leasesOnly bool) string {
	if len(costs) == 0 {
		return "\nNo step passed: no component's cost is fitted.\n"
	}
	var b strings.Builder
	if leasesOnly {
		b.WriteString("\nCosts fitted over every step whose load was delivered, within the SLOs or not:\n")
	}
	b.WriteString("\n| component | role | replicas | cores at no nodes | cores per 1,000 nodes | requests/s per core | steps fitted | left out: role at its cap |\n|---|---|---|---|---|---|---|---|\n")
	for _, c := range costs {
		perCore := "-"
		if c.RequestsPerCore > 0 {
			perCore = fmt.Sprintf("%.0f", c.RequestsPerCore)
		}
		fmt.Fprintf(&b, "| %s | %s | %d | %.3f | %.3f | %s | %v | %v |\n", c.Component, c.Role, c.Replicas, c.BaseCores, c.CoresPer1000Nodes, perCore, c.Steps, c.CappedSteps)
	}
	return b.String()
}

func seconds(v float64) string {
	if math.IsNaN(v) || v == 0 {
		return "-"
	}
	if v < 1 {
		return fmt.Sprintf("%.0f ms", 1e3*v)
	}
	return fmt.Sprintf("%.2f s", v)
}

// restartLine is the restart storm in one paragraph.
func restartLine(r RestartReport) string {
	recovered := fmt.Sprintf("not recovered within its timeout (%d of %d probe calls missed an SLO, the last %s)", r.ProbeMisses, r.ProbeCalls, r.LastMiss)
	if r.Recovered {
		recovered = fmt.Sprintf("every SLO held again after %.1f s (target ≤ %.0f s)", r.RecoverySeconds, RestartRecoveryTarget.Seconds())
	}
	var peaks []string
	for _, name := range slices.Sorted(maps.Keys(r.PeakMemoryBytes)) {
		peaks = append(peaks, fmt.Sprintf("%s %.0f MiB", name, float64(r.PeakMemoryBytes[name])/(1<<20)))
	}
	return fmt.Sprintf("**Restart storm (%d nodes, every apiserver restarted at once, %d node informers reconnecting by %s):** %s; "+
		"the apiservers were ready after %.1f s and every informer was served again after %.1f s (%d fetched their state again, %d of them by a watch list). Peak memory: %s.",
		r.Nodes, r.Informers, informerKind(r.WatchList), recovered, r.ReadySeconds, r.ReconnectedSeconds, r.Refetched, r.Streamed, strings.Join(peaks, ", "))
}

// StormRatioTarget is the goal for the split arm's storm ÷ quiet probe p99.
const StormRatioTarget = 1.2

// RatioText is one arm's ratio: its mean with the 95 % interval, the median, the runs counted
// and left out, and the main etcd's median hours to quota.
func RatioText(r RatioStats) string {
	if r.Runs == 0 {
		return fmt.Sprintf("no valid run (%d invalid)", r.Invalid)
	}
	ci := "no interval"
	if r.CI95 != nil {
		ci = fmt.Sprintf("95 %% CI %.2f–%.2f", r.CI95[0], r.CI95[1])
	}
	return fmt.Sprintf("mean %.2f (%s; median %.2f; %d valid runs, %d invalid; main etcd at quota in %s)", r.Mean, ci, r.Median, r.Runs, r.Invalid, hours(r.HoursToQuota))
}

// hours is a projected time to quota; 0 means the database did not grow.
func hours(h float64) string {
	if h <= 0 {
		return "never (no growth)"
	}
	return fmt.Sprintf("%.1f h", h)
}
