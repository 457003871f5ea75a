// Package scale measures a control plane under node load as clusterloader2 does: the API call
// latency SLIs from the apiservers' histograms, pod start-up from a client's watch, and etcd's
// disk latencies, each step of a node ramp judged against the upstream SLOs. Plain Go: the
// benchmark (test/machines/processes, make bench-scale) drives it.
package scale

import (
	"bufio"
	"fmt"
	"io"
	"math"
	"slices"
	"strconv"
	"strings"
)

// Sample is one series of a scrape: a metric name, its labels and its value.
type Sample struct {
	Name   string
	Labels map[string]string
	Value  float64
}

// ParseText reads the Prometheus text exposition format (what /metrics serves), keeping the
// samples whose metric name keep accepts.
func ParseText(r io.Reader, keep func(name string) bool) ([]Sample, error) {
	var out []Sample
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), 4<<20)
	for line := 1; sc.Scan(); line++ {
		text := strings.TrimSpace(sc.Text())
		if text == "" || text[0] == '#' {
			continue
		}
		name, rest := text, ""
		if i := strings.IndexAny(text, "{ "); i >= 0 {
			name, rest = text[:i], text[i:]
		}
		if !keep(name) {
			continue
		}
		s := Sample{Name: name, Labels: map[string]string{}}
		if strings.HasPrefix(rest, "{") {
			var err error
			if rest, err = parseLabels(rest[1:], s.Labels); err != nil {
				return nil, fmt.Errorf("line %d: %w", line, err)
			}
		}
		fields := strings.Fields(rest)
		if len(fields) == 0 {
			return nil, fmt.Errorf("line %d: %s has no value", line, name)
		}
		v, err := parseValue(fields[0])
		if err != nil {
			return nil, fmt.Errorf("line %d: %w", line, err)
		}
		s.Value = v
		out = append(out, s)
	}
	return out, sc.Err()
}

// parseLabels reads `name="value",...}` into labels and returns what follows the brace.
func parseLabels(s string, labels map[string]string) (string, error) {
	for {
		s = strings.TrimLeft(s, " ,")
		if strings.HasPrefix(s, "}") {
			return s[1:], nil
		}
		eq := strings.IndexByte(s, '=')
		if eq <= 0 || len(s) < eq+2 || s[eq+1] != '"' {
			return "", fmt.Errorf("malformed labels near %q", s)
		}
		name := strings.TrimSpace(s[:eq])
		s = s[eq+2:]
		var value strings.Builder
		i := 0
		for ; i < len(s) && s[i] != '"'; i++ {
			if s[i] == '\\' && i+1 < len(s) {
				i++
				switch s[i] {
				case 'n':
					value.WriteByte('\n')
				default:
					value.WriteByte(s[i])
				}
				continue
			}
			value.WriteByte(s[i])
		}
		if i == len(s) {
			return "", fmt.Errorf("label %s: unterminated value", name)
		}
		labels[name] = value.String()
		s = s[i+1:]
	}
}

func parseValue(s string) (float64, error) {
	switch s {
	case "+Inf":
		return math.Inf(1), nil
	case "-Inf":
		return math.Inf(-1), nil
	}
	return strconv.ParseFloat(s, 64)
}

// Bucket is a cumulative histogram bucket: Count observations at most UpperBound.
type Bucket struct {
	UpperBound float64
	Count      float64
}

// Histogram is a cumulative histogram, buckets in ascending order, the last +Inf.
type Histogram []Bucket

// Histograms groups the `<name>_bucket` samples by the labels key names (le aside), summing
// series that agree on them (several apiservers, several instances).
func Histograms(samples []Sample, name string, key func(labels map[string]string) (string, bool)) map[string]Histogram {
	sums := map[string]map[float64]float64{}
	for _, s := range samples {
		if s.Name != name+"_bucket" {
			continue
		}
		k, ok := key(s.Labels)
		if !ok {
			continue
		}
		le, err := parseValue(s.Labels["le"])
		if err != nil {
			continue
		}
		if sums[k] == nil {
			sums[k] = map[float64]float64{}
		}
		sums[k][le] += s.Value
	}
	out := map[string]Histogram{}
	for k, buckets := range sums {
		var h Histogram
		for le, n := range buckets {
			h = append(h, Bucket{UpperBound: le, Count: n})
		}
		slices.SortFunc(h, func(a, b Bucket) int { return compareFloat(a.UpperBound, b.UpperBound) })
		out[k] = h
	}
	return out
}

func compareFloat(a, b float64) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

// Total is the number of observations.
func (h Histogram) Total() float64 {
	if len(h) == 0 {
		return 0
	}
	return h[len(h)-1].Count
}

// Since is the histogram of the observations made after prev (a counter reset, as after a
// restart, counts from zero).
func (h Histogram) Since(prev Histogram) Histogram {
	before := map[float64]float64{}
	for _, b := range prev {
		before[b.UpperBound] = b.Count
	}
	reset := prev.Total() > h.Total()
	out := make(Histogram, len(h))
	for i, b := range h {
		out[i] = b
		if !reset {
			out[i].Count -= before[b.UpperBound]
		}
	}
	return out
}

// Add sums two histograms with the same buckets.
func (h Histogram) Add(o Histogram) Histogram {
	if len(h) == 0 {
		return slices.Clone(o)
	}
	out := slices.Clone(h)
	for i := range out {
		if i < len(o) && o[i].UpperBound == out[i].UpperBound {
			out[i].Count += o[i].Count
		}
	}
	return out
}

// Quantile estimates the q-quantile as Prometheus' histogram_quantile does: linear within the
// bucket that holds it, the lowest bucket starting at 0, the +Inf bucket answered by the highest
// finite bound. NaN when the histogram is empty.
func (h Histogram) Quantile(q float64) float64 {
	total := h.Total()
	if len(h) < 2 || total <= 0 || math.IsNaN(q) {
		return math.NaN()
	}
	rank := q * total
	i := slices.IndexFunc(h, func(b Bucket) bool { return b.Count >= rank })
	if i == len(h)-1 {
		return h[len(h)-2].UpperBound
	}
	lower, below := 0.0, 0.0
	if i > 0 {
		lower, below = h[i-1].UpperBound, h[i-1].Count
	}
	upper, in := h[i].UpperBound, h[i].Count-below
	if in == 0 {
		return upper
	}
	return lower + (upper-lower)*(rank-below)/in
}

// Above counts the observations above bound, which must be a bucket's upper bound; ok is false
// when it is not one.
func (h Histogram) Above(bound float64) (n float64, ok bool) {
	for _, b := range h {
		if b.UpperBound == bound {
			return h.Total() - b.Count, true
		}
	}
	return 0, false
}
