package fleet

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/clusterforge/clusterforge/test/scale"
)

// Summary is build/bench/fleet/summary.json: each figure the median over the runs, its range
// beside it, and every run's scenarios.
type Summary struct {
	Date    string        `json:"date"`
	Commit  string        `json:"commit"`
	Machine scale.Machine `json:"machine"`
	Stack   string        `json:"stack"`
	Scale   float64       `json:"scale"`
	Speedup float64       `json:"speedup"`
	Runs    int           `json:"runs"`
	// Valid is false when any run of any scenario delivered less than it offered.
	Valid                 bool       `json:"valid"`
	RollWorkersHours      float64    `json:"rollWorkersHours"`
	RollWorkersHoursRange [2]float64 `json:"rollWorkersHoursRange"`
	GrowGpuHours          float64    `json:"growGpuHours"`
	GrowGpuHoursRange     [2]float64 `json:"growGpuHoursRange"`
	RemediateHours        float64    `json:"remediateHours"`
	RemediateHoursRange   [2]float64 `json:"remediateHoursRange"`
	// Calls are the requests of the median run by action, every scenario together; Throttled,
	// RetriedEarly and FailedCalls the most of any run.
	Calls        map[string]int `json:"calls"`
	Throttled    int            `json:"throttled"`
	RetriedEarly int            `json:"retriedEarly"`
	FailedCalls  int            `json:"failedCalls"`
	Each         [][]Scenario   `json:"each"`
}

// Summarize reduces the runs.
func Summarize(runs [][]Scenario) Summary {
	s := Summary{Runs: len(runs), Valid: len(runs) > 0, Each: runs}
	hours := map[string][]float64{}
	for _, run := range runs {
		for _, sc := range run {
			hours[sc.Name] = append(hours[sc.Name], sc.Hours)
			s.Valid = s.Valid && sc.Valid
		}
	}
	s.RollWorkersHours, s.RollWorkersHoursRange = medianRange(hours[RollWorkers])
	s.GrowGpuHours, s.GrowGpuHoursRange = medianRange(hours[GrowGPU])
	s.RemediateHours, s.RemediateHoursRange = medianRange(hours[Remediate])
	totals := make([]int, len(runs))
	for i, run := range runs {
		var throttled, early, failed int
		for _, sc := range run {
			totals[i] += total(sc.Calls)
			throttled, early, failed = throttled+sc.Throttled, early+sc.RetriedEarly, failed+sc.FailedCalls
		}
		s.Throttled, s.RetriedEarly, s.FailedCalls = max(s.Throttled, throttled), max(s.RetriedEarly, early), max(s.FailedCalls, failed)
	}
	if len(runs) > 0 {
		order := make([]int, len(runs))
		for i := range order {
			order[i] = i
		}
		slices.SortFunc(order, func(a, b int) int { return totals[a] - totals[b] })
		s.Calls = map[string]int{}
		for _, sc := range runs[order[len(order)/2]] {
			for action, n := range sc.Calls {
				s.Calls[action] += n
			}
		}
	}
	return s
}

func medianRange(v []float64) (float64, [2]float64) {
	if len(v) == 0 {
		return 0, [2]float64{}
	}
	v = slices.Clone(v)
	slices.Sort(v)
	m := v[len(v)/2]
	if len(v)%2 == 0 {
		m = (v[len(v)/2-1] + v[len(v)/2]) / 2
	}
	return m, [2]float64{v[0], v[len(v)-1]}
}

// Write stores summary.json, fleet.md and progress.svg (the first run) under dir.
func (s Summary) Write(dir string) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	data, err := json.MarshalIndent(s, "", "  ")
	if err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(dir, "summary.json"), append(data, '\n'), 0o644); err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(dir, "fleet.md"), []byte(s.Markdown()), 0o644); err != nil {
		return err
	}
	if len(s.Each) == 0 {
		return nil
	}
	return os.WriteFile(filepath.Join(dir, "progress.svg"), []byte(Chart(s.Each[0])), 0o644)
}

// Markdown is the report's table.
func (s Summary) Markdown() string {
	var b strings.Builder
	fmt.Fprintf(&b, "`make bench-fleet` on %s, commit %s, %d cores (%s): stack %s at %.0f%% of its scale sets' capacity, %d runs, time %g times faster than real time; median (range) over the runs, hours of the model's time.\n\n",
		s.Date, s.Commit, s.Machine.Cores, s.Machine.CPU, s.Stack, 100*s.Scale, s.Runs, s.Speedup)
	b.WriteString("Machines, calls, 429s, retries before their `Retry-After` and failed calls are the last run's.\n\n")
	b.WriteString("| scenario | machines | hours | calls | throttled | retried before Retry-After | failed calls | valid |\n|---|---|---|---|---|---|---|---|\n")
	for _, name := range Scenarios {
		var hours []float64
		var last Scenario
		valid := true
		for _, run := range s.Each {
			for _, sc := range run {
				if sc.Name == name {
					hours, last, valid = append(hours, sc.Hours), sc, valid && sc.Valid
				}
			}
		}
		if len(hours) == 0 {
			continue
		}
		m, r := medianRange(hours)
		fmt.Fprintf(&b, "| %s | %d of %d | %.2f (%.2f-%.2f) | %d | %d | %d | %d | %v |\n", name, last.Delivered, last.Offered, m, r[0], r[1], total(last.Calls), last.Throttled, last.RetriedEarly, last.FailedCalls, valid)
	}
	for _, run := range s.Each[len(s.Each)-1:] {
		for _, sc := range run {
			if u := sc.Outage; u != nil {
				fmt.Fprintf(&b, "\n%s, last run: %s.\n", sc.Name, u)
			}
			if r := sc.Reads; r != nil {
				fmt.Fprintf(&b, "\n%s, last run: %s requests a minute, the subscription's limit %d, the autoscaler's share %d (of the burst, %d), planned %d: the restart's minute %d, then median %g, most %d.\n",
					sc.Name, r.Policy, r.Limit, r.Share, r.Burst, r.Planned, r.First, r.Median, r.Max)
			}
			if len(sc.Fabrics) == 0 {
				continue
			}
			steps := make([]string, len(sc.Fabrics))
			for i, f := range sc.Fabrics {
				steps[i] = fmt.Sprintf("%d whole, %d partly", f.Whole, f.Partly)
			}
			fmt.Fprintf(&b, "\n%s, last run: InfiniBand placement groups after each step (a gang waits for a whole one): %s.\n", sc.Name, strings.Join(steps, "; "))
		}
	}
	actions := make([]string, 0, len(s.Calls))
	for a := range s.Calls {
		actions = append(actions, a)
	}
	slices.Sort(actions)
	b.WriteString("\nCalls of the median run by action, every scenario together:\n\n| action | calls |\n|---|---|\n")
	for _, a := range actions {
		fmt.Fprintf(&b, "| `%s` | %d |\n", a, s.Calls[a])
	}
	return b.String()
}

// Chart draws each scenario's share of machines done against the model's hours.
func Chart(run []Scenario) string {
	const w, h, pad = 640.0, 320.0, 40.0
	most := 0.0
	for _, sc := range run {
		most = max(most, sc.Hours)
	}
	most = max(most, 0.1)
	colours := []string{"#1f77b4", "#d62728", "#2ca02c", "#9467bd"}
	var b strings.Builder
	fmt.Fprintf(&b, `<svg xmlns="http://www.w3.org/2000/svg" width="%.0f" height="%.0f" font-family="sans-serif" font-size="12">`+"\n", w, h)
	fmt.Fprintf(&b, `<line x1="%.0f" y1="%.0f" x2="%.0f" y2="%.0f" stroke="black"/><line x1="%.0f" y1="%.0f" x2="%.0f" y2="%.0f" stroke="black"/>`+"\n", pad, h-pad, w-pad, h-pad, pad, pad, pad, h-pad)
	fmt.Fprintf(&b, `<text x="%.0f" y="%.0f">hours (model)</text><text x="%.0f" y="%.0f">%.1f</text><text x="4" y="%.0f">100%%</text><text x="4" y="%.0f">0%%</text>`+"\n", w/2, h-8, w-pad, h-pad+14, most, pad, h-pad)
	for i, sc := range run {
		var pts []string
		for _, p := range sc.Progress {
			x := pad + (w-2*pad)*p.Minutes/60/most
			y := h - pad - (h-2*pad)*float64(p.Done)/float64(max(sc.Offered, 1))
			pts = append(pts, fmt.Sprintf("%.1f,%.1f", x, y))
		}
		colour := colours[i%len(colours)]
		fmt.Fprintf(&b, `<polyline fill="none" stroke="%s" stroke-width="2" points="%s"/>`+"\n", colour, strings.Join(pts, " "))
		fmt.Fprintf(&b, `<text x="%.0f" y="%.0f" fill="%s">%s</text>`+"\n", w-pad-120, pad+float64(i)*16, colour, sc.Name)
	}
	b.WriteString("</svg>\n")
	return b.String()
}
