package scale

import (
	"fmt"
	"math"
	"os"
	"path/filepath"
	"slices"
)

// Charts are the report's charts by file name.
func Charts(steps []Step, storm StormReport, restarts []RestartReport) map[string]Chart {
	slo := Chart{Title: "API call and pod start-up p99 against nodes",
		Subtitle: "API calls: the worst call of each SLO class, clusterloader2's p99 of per-minute p99s", XLabel: "nodes", YLabel: "p99 (s)", LogY: true,
		Lines: []Line{{1, "1 s: mutating, read resource"}, {5, "5 s: pod start-up"}, {30, "30 s: LIST"}}}
	for _, class := range Classes {
		s := Series{Name: class.Name}
		for _, st := range steps {
			if worst, ok := worstP99(st, class); ok {
				s.Points = append(s.Points, Point{float64(st.Nodes), worst})
			}
		}
		slo.Series = append(slo.Series, s)
	}
	pods := Series{Name: "pod start-up"}
	for _, st := range steps {
		if st.PodStartup.Pods > 0 {
			pods.Points = append(pods.Points, Point{float64(st.Nodes), st.PodStartup.P99Seconds})
		}
	}
	slo.Series = append(slo.Series, pods)

	const summed = "each component summed over its processes (every apiserver, every member); the report states their cores"
	cpu := Chart{Title: "CPU per component against nodes", Subtitle: summed, XLabel: "nodes", YLabel: "cores (mean over the hold)"}
	memory := Chart{Title: "Memory per component against nodes", Subtitle: summed, XLabel: "nodes", YLabel: "resident GiB (end of hold)"}
	for _, component := range components(steps) {
		c, m := Series{Name: component}, Series{Name: component}
		for _, st := range steps {
			for _, u := range st.Usage {
				if u.Component == component {
					c.Points = append(c.Points, Point{float64(st.Nodes), u.CPUCores})
					m.Points = append(m.Points, Point{float64(st.Nodes), float64(u.RSSBytes) / (1 << 30)})
				}
			}
		}
		cpu.Series, memory.Series = append(cpu.Series, c), append(memory.Series, m)
	}
	size := Chart{Title: "etcd database size against nodes (largest member)", XLabel: "nodes", YLabel: "MiB"}
	for _, role := range []string{KindEtcdMain, KindEtcdEvents} {
		s := Series{Name: role}
		for _, st := range steps {
			largest := 0.0
			for _, m := range st.Etcd {
				if m.Role == role {
					largest = math.Max(largest, m.DBSizeBytes)
				}
			}
			if largest > 0 {
				s.Points = append(s.Points, Point{float64(st.Nodes), largest / (1 << 20)})
			}
		}
		size.Series = append(size.Series, s)
	}

	ratios := storm.Ratios()
	series := Chart{Title: "Main etcd write probe through an event storm",
		Subtitle: fmt.Sprintf("%d nodes, %.0f events/s; p99 storm ÷ quiet: split %.2f, unsplit %.2f (median of the valid runs)",
			storm.Nodes, storm.Rate, ratios["split"].Median, ratios["unsplit"].Median),
		XLabel: "seconds into the run", YLabel: "probe p99 per 5 s (ms)", LogY: true}
	for _, run := range storm.Runs {
		s := Series{Name: run.Name}
		if run.Invalid != "" {
			s.Name += " (invalid)"
		}
		for _, p := range run.Series {
			s.Points = append(s.Points, Point{p.X, 1e3 * p.Y})
		}
		series.Series = append(series.Series, s)
		if len(series.Bands) == 0 && len(run.Phases) == 3 {
			from := run.Phases[0].Seconds
			series.Bands = append(series.Bands, Band{From: from, To: from + run.Phases[1].Seconds, Label: "storm"})
		}
	}
	return map[string]Chart{"slo.svg": slo, "cpu.svg": cpu, "memory.svg": memory, "etcd-size.svg": size, "storm.svg": series,
		"restart.svg": restartChart(restarts)}
}

// restartChart is each restart storm's recovery: the SLO probe's slowest call of each round
// against its threshold, and the informers served again.
func restartChart(restarts []RestartReport) Chart {
	c := Chart{Title: "Recovery after every apiserver restarted at once",
		Subtitle: "each second: the SLO probe's slowest call as a share of its threshold, and the node informers served again",
		XLabel:   "seconds since every apiserver was down", YLabel: "% (of the call's SLO; of the informers)",
		Lines: []Line{{100, "SLO threshold; every informer"}}}
	for _, r := range restarts {
		calls, served := Series{Name: informerKind(r.WatchList) + ": slowest call"}, Series{Name: informerKind(r.WatchList) + ": informers served"}
		for _, round := range r.Timeline {
			calls.Points = append(calls.Points, Point{round.Seconds, 100 * round.SlowestShare})
			served.Points = append(served.Points, Point{round.Seconds, 100 * round.Served})
		}
		c.Series = append(c.Series, calls, served)
	}
	return c
}

// WriteCharts writes Charts into dir.
func WriteCharts(dir string, steps []Step, storm StormReport, restarts []RestartReport) error {
	for name, c := range Charts(steps, storm, restarts) {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(c.SVG()), 0o644); err != nil {
			return err
		}
	}
	return nil
}

// worstP99 is the highest clusterloader2 p99 among a step's calls of a class.
func worstP99(st Step, class Class) (float64, bool) {
	worst, ok := 0.0, false
	for _, c := range st.Calls {
		if c.Class == class.Name && !math.IsNaN(c.P99) {
			worst, ok = math.Max(worst, c.P99), true
		}
	}
	return worst, ok
}

// components are the components measured in any step, in name order.
func components(steps []Step) []string {
	var out []string
	for _, st := range steps {
		for _, u := range st.Usage {
			if !slices.Contains(out, u.Component) {
				out = append(out, u.Component)
			}
		}
	}
	slices.Sort(out)
	return out
}
