package scale

import (
	"encoding/xml"
	"slices"
	"strings"
	"testing"
)

func TestTicks(t *testing.T) {
	for _, c := range []struct {
		lo, hi float64
		want   []float64
	}{
		{0, 1000, []float64{0, 200, 400, 600, 800, 1000}},
		{0, 10000, []float64{0, 2000, 4000, 6000, 8000, 10000}},
		{0, 0.75, []float64{0, 0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8}},
	} {
		if got := linearTicks(c.lo, c.hi); !slices.Equal(got, c.want) {
			t.Errorf("linearTicks(%v, %v) = %v, want %v", c.lo, c.hi, got, c.want)
		}
	}
	if got, want := logTicks(0.05, 40), []float64{0.01, 0.1, 1, 10, 100}; !slices.Equal(got, want) {
		t.Errorf("logTicks = %v, want %v", got, want)
	}
}

// A chart is well-formed SVG with one line per series and its hostile names escaped.
func TestChartIsWellFormedSVG(t *testing.T) {
	c := Chart{Title: "t <&>", LogY: true, Lines: []Line{{1, "1 s"}}, Bands: []Band{{10, 20, "storm"}},
		Series: []Series{{Name: "a", Points: []Point{{1, 0.1}, {2, 0.5}}}, {Name: `b"</svg>`, Points: []Point{{1, 2}, {2, 0}}}}}
	svg := c.SVG()
	d := xml.NewDecoder(strings.NewReader(svg))
	polylines := 0
	for {
		tok, err := d.Token()
		if err != nil {
			if err.Error() != "EOF" {
				t.Fatalf("%v in\n%s", err, svg)
			}
			break
		}
		if se, ok := tok.(xml.StartElement); ok && se.Name.Local == "polyline" {
			polylines++
		}
	}
	// b's second point is 0, which a log axis cannot show: one point left, no line.
	if polylines != 1 {
		t.Errorf("%d polylines, want 1", polylines)
	}
	if !strings.Contains(svg, "b&#34;&lt;/svg&gt;") {
		t.Error("series name not escaped")
	}
}
