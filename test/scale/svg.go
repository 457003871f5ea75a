package scale

import (
	"fmt"
	"html"
	"math"
	"strconv"
	"strings"
)

// Chart is a line chart rendered as SVG, small enough to read at a glance in a README.
type Chart struct {
	// Title is the chart's headline; Subtitle the line under it.
	Title, Subtitle, XLabel, YLabel string
	LogY                            bool
	Series                          []Series
	// Lines are horizontal reference lines (thresholds); Bands shade ranges of x (a storm).
	Lines []Line
	Bands []Band
}

// Series is one named line.
type Series struct {
	Name   string
	Points []Point
}

// Line is a labelled horizontal line at Y.
type Line struct {
	Y     float64
	Label string
}

// Band is a labelled range of x.
type Band struct {
	From, To float64
	Label    string
}

var palette = []string{"#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd", "#8c564b", "#e377c2", "#17becf", "#7f7f7f", "#bcbd22", "#000000", "#aec7e8"}

const (
	chartW, chartH                   = 760, 400
	marginL, marginR, marginT, margB = 70, 190, 46, 50
)

// SVG renders the chart.
func (c Chart) SVG() string {
	xmin, xmax, ymin, ymax := math.Inf(1), math.Inf(-1), math.Inf(1), math.Inf(-1)
	for _, s := range c.Series {
		for _, p := range s.Points {
			if c.LogY && p.Y <= 0 {
				continue
			}
			xmin, xmax, ymin, ymax = math.Min(xmin, p.X), math.Max(xmax, p.X), math.Min(ymin, p.Y), math.Max(ymax, p.Y)
		}
	}
	for _, l := range c.Lines {
		ymin, ymax = math.Min(ymin, l.Y), math.Max(ymax, l.Y)
	}
	if math.IsInf(xmin, 0) { // nothing to draw
		xmin, xmax, ymin, ymax = 0, 1, 1, 10
	}
	if xmin == xmax {
		xmin, xmax = xmin-1, xmax+1
	}
	if !c.LogY {
		ymin = math.Min(0, ymin)
	}
	if ymin == ymax {
		ymax = ymin + 1
	}
	yticks := linearTicks(ymin, ymax)
	if c.LogY {
		yticks = logTicks(ymin, ymax)
	}
	ymin, ymax = math.Min(ymin, yticks[0]), math.Max(ymax, yticks[len(yticks)-1])
	xticks := linearTicks(math.Min(0, xmin), xmax)
	xmin, xmax = xticks[0], math.Max(xmax, xticks[len(xticks)-1])

	plotW, plotH := float64(chartW-marginL-marginR), float64(chartH-marginT-margB)
	px := func(x float64) float64 { return float64(marginL) + (x-xmin)/(xmax-xmin)*plotW }
	py := func(y float64) float64 {
		if c.LogY {
			return float64(marginT) + plotH - (math.Log10(y)-math.Log10(ymin))/(math.Log10(ymax)-math.Log10(ymin))*plotH
		}
		return float64(marginT) + plotH - (y-ymin)/(ymax-ymin)*plotH
	}
	var b strings.Builder
	fmt.Fprintf(&b, `<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" viewBox="0 0 %d %d" font-family="sans-serif" font-size="12">`+"\n", chartW, chartH, chartW, chartH)
	fmt.Fprintf(&b, `<rect width="100%%" height="100%%" fill="white"/>`+"\n")
	fmt.Fprintf(&b, `<text x="%d" y="18" font-size="15" font-weight="bold">%s</text>`+"\n", marginL, html.EscapeString(c.Title))
	fmt.Fprintf(&b, `<text x="%d" y="34" fill="#444">%s</text>`+"\n", marginL, html.EscapeString(c.Subtitle))
	for _, band := range c.Bands {
		fmt.Fprintf(&b, `<rect x="%.1f" y="%d" width="%.1f" height="%.1f" fill="#fdd" /><text x="%.1f" y="%d" fill="#a00">%s</text>`+"\n",
			px(band.From), marginT, px(band.To)-px(band.From), plotH, px(band.From)+4, marginT+14, html.EscapeString(band.Label))
	}
	for _, t := range yticks {
		fmt.Fprintf(&b, `<line x1="%d" x2="%.1f" y1="%.1f" y2="%.1f" stroke="#ddd"/><text x="%d" y="%.1f" text-anchor="end">%s</text>`+"\n",
			marginL, float64(marginL)+plotW, py(t), py(t), marginL-6, py(t)+4, tickLabel(t))
	}
	for _, t := range xticks {
		fmt.Fprintf(&b, `<line x1="%.1f" x2="%.1f" y1="%d" y2="%.1f" stroke="#eee"/><text x="%.1f" y="%.1f" text-anchor="middle">%s</text>`+"\n",
			px(t), px(t), marginT, float64(marginT)+plotH, px(t), float64(marginT)+plotH+16, tickLabel(t))
	}
	fmt.Fprintf(&b, `<rect x="%d" y="%d" width="%.1f" height="%.1f" fill="none" stroke="#333"/>`+"\n", marginL, marginT, plotW, plotH)
	fmt.Fprintf(&b, `<text x="%.1f" y="%d" text-anchor="middle">%s</text>`+"\n", float64(marginL)+plotW/2, chartH-12, html.EscapeString(c.XLabel))
	fmt.Fprintf(&b, `<text transform="translate(16 %.1f) rotate(-90)" text-anchor="middle">%s</text>`+"\n", float64(marginT)+plotH/2, html.EscapeString(c.YLabel))
	for _, l := range c.Lines {
		fmt.Fprintf(&b, `<line x1="%d" x2="%.1f" y1="%.1f" y2="%.1f" stroke="#000" stroke-dasharray="6 4"/><text x="%.1f" y="%.1f" text-anchor="end">%s</text>`+"\n",
			marginL, float64(marginL)+plotW, py(l.Y), py(l.Y), float64(marginL)+plotW-4, py(l.Y)-4, html.EscapeString(l.Label))
	}
	for i, s := range c.Series {
		color := palette[i%len(palette)]
		var pts []string
		for _, p := range s.Points {
			if c.LogY && p.Y <= 0 {
				continue
			}
			pts = append(pts, fmt.Sprintf("%.1f,%.1f", px(p.X), py(p.Y)))
			fmt.Fprintf(&b, `<circle cx="%.1f" cy="%.1f" r="2.5" fill="%s"/>`+"\n", px(p.X), py(p.Y), color)
		}
		if len(pts) > 1 {
			fmt.Fprintf(&b, `<polyline points="%s" fill="none" stroke="%s" stroke-width="2"/>`+"\n", strings.Join(pts, " "), color)
		}
		ly := marginT + 10 + 18*i
		fmt.Fprintf(&b, `<line x1="%d" x2="%d" y1="%d" y2="%d" stroke="%s" stroke-width="3"/><text x="%d" y="%d">%s</text>`+"\n",
			chartW-marginR+12, chartW-marginR+30, ly, ly, color, chartW-marginR+36, ly+4, html.EscapeString(s.Name))
	}
	b.WriteString("</svg>\n")
	return b.String()
}

// linearTicks are 4 to 10 round ticks (1, 2 or 5 times a power of ten apart) covering [lo, hi].
func linearTicks(lo, hi float64) []float64 {
	span := hi - lo
	step := math.Pow(10, math.Floor(math.Log10(span))-1)
	for _, m := range []float64{1, 2, 5, 10, 20} {
		if span/(step*m) <= 8 {
			step *= m
			break
		}
	}
	var out []float64
	for k := math.Floor(lo / step); ; k++ {
		// Twelve digits drop the binary noise of k × step (0.30000000000000004).
		t, _ := strconv.ParseFloat(strconv.FormatFloat(k*step, 'g', 12, 64), 64)
		out = append(out, t)
		if t >= hi {
			return out
		}
	}
}

// logTicks are the powers of ten covering [lo, hi], with 2 and 5 between when few.
func logTicks(lo, hi float64) []float64 {
	first, last := math.Floor(math.Log10(lo)), math.Ceil(math.Log10(hi))
	var out []float64
	for e := first; e <= last; e++ {
		for _, m := range []float64{1, 2, 5} {
			if m == 1 || last-first <= 2 {
				if v := m * math.Pow(10, e); v <= math.Pow(10, last) {
					out = append(out, v)
				}
			}
		}
	}
	return out
}

func tickLabel(v float64) string {
	switch a := math.Abs(v); {
	case a == 0:
		return "0"
	case a >= 1e4:
		return fmt.Sprintf("%gk", v/1e3)
	case a < 0.01:
		return fmt.Sprintf("%.0e", v)
	}
	return fmt.Sprintf("%g", math.Round(v*1000)/1000)
}
