package bench

import (
	"bytes"
	"encoding/xml"
	"fmt"
	"io"
	"math"
	"strconv"
	"strings"
)

// ChartSeries is one line of a chart: a value per x position (NaN or ≤ 0:
// no point there).
type ChartSeries struct {
	// Name is the legend text and the line's data-series attribute.
	Name string
	// Y holds one value per x position of the chart.
	Y []float64
	// Color is an SVG colour ("#1f77b4").
	Color string
	// Dashed draws a dashed line (the baselines).
	Dashed bool
}

// Chart is a line chart with categorical x positions (equally spaced, e.g.
// the concurrencies 1 … 32) and a logarithmic y axis, rendered by
// [Chart.WriteSVG] as a self-contained SVG document.
type Chart struct {
	Title  string
	XLabel string
	YLabel string
	X      []string // the labels of the x positions
	Series []ChartSeries
}

// chart geometry, in SVG user units.
const (
	chartW, chartH             = 760.0, 440.0
	chartLeft, chartRight      = 80.0, 200.0 // plot margins (the legend sits on the right)
	chartTop, chartBottom      = 40.0, 60.0
	chartPlotW, chartPlotH     = chartW - chartLeft - chartRight, chartH - chartTop - chartBottom
	chartFont              int = 12
)

// WriteSVG writes c as an SVG document: axes with a decade grid on y, one
// <polyline class="series" data-series="…"> per series (with a circle per
// point) and a legend.
func (c Chart) WriteSVG(w io.Writer) error {
	lo, hi := math.Inf(1), math.Inf(-1)
	for _, s := range c.Series {
		for _, y := range s.Y {
			if y > 0 && !math.IsNaN(y) && !math.IsInf(y, 0) {
				lo, hi = math.Min(lo, y), math.Max(hi, y)
			}
		}
	}
	if math.IsInf(lo, 1) {
		lo, hi = 1, 10
	}
	dLo, dHi := math.Floor(math.Log10(lo)), math.Ceil(math.Log10(hi))
	if dHi <= dLo {
		dHi = dLo + 1
	}
	xAt := func(i int) float64 {
		if len(c.X) <= 1 {
			return chartLeft + chartPlotW/2
		}
		return chartLeft + chartPlotW*float64(i)/float64(len(c.X)-1)
	}
	yAt := func(v float64) float64 {
		return chartTop + chartPlotH*(1-(math.Log10(v)-dLo)/(dHi-dLo))
	}
	var b bytes.Buffer
	fmt.Fprintf(&b, `<svg xmlns="http://www.w3.org/2000/svg" width="%g" height="%g" viewBox="0 0 %g %g" font-family="sans-serif" font-size="%d">`+"\n", chartW, chartH, chartW, chartH, chartFont)
	fmt.Fprintf(&b, `<rect width="%g" height="%g" fill="white"/>`+"\n", chartW, chartH)
	fmt.Fprintf(&b, `<text x="%g" y="24" text-anchor="middle" font-size="15">%s</text>`+"\n", chartLeft+chartPlotW/2, esc(c.Title))
	// y grid: decades, with 2× and 5× minor lines.
	for d := dLo; d <= dHi; d++ {
		v := math.Pow(10, d)
		y := yAt(v)
		fmt.Fprintf(&b, `<line x1="%g" y1="%.1f" x2="%g" y2="%.1f" stroke="#bbb"/>`+"\n", chartLeft, y, chartLeft+chartPlotW, y)
		fmt.Fprintf(&b, `<text x="%g" y="%.1f" text-anchor="end" dominant-baseline="middle">%s</text>`+"\n", chartLeft-6, y, esc(humanCount(v)))
		if d < dHi {
			for _, m := range []float64{2, 5} {
				ym := yAt(m * v)
				fmt.Fprintf(&b, `<line x1="%g" y1="%.1f" x2="%g" y2="%.1f" stroke="#eee"/>`+"\n", chartLeft, ym, chartLeft+chartPlotW, ym)
			}
		}
	}
	for i, l := range c.X {
		x := xAt(i)
		fmt.Fprintf(&b, `<line x1="%.1f" y1="%g" x2="%.1f" y2="%g" stroke="#eee"/>`+"\n", x, chartTop, x, chartTop+chartPlotH)
		fmt.Fprintf(&b, `<text x="%.1f" y="%g" text-anchor="middle">%s</text>`+"\n", x, chartTop+chartPlotH+18, esc(l))
	}
	fmt.Fprintf(&b, `<rect x="%g" y="%g" width="%g" height="%g" fill="none" stroke="#333"/>`+"\n", chartLeft, chartTop, chartPlotW, chartPlotH)
	fmt.Fprintf(&b, `<text x="%g" y="%g" text-anchor="middle">%s</text>`+"\n", chartLeft+chartPlotW/2, chartH-14, esc(c.XLabel))
	fmt.Fprintf(&b, `<text transform="translate(18 %g) rotate(-90)" text-anchor="middle">%s</text>`+"\n", chartTop+chartPlotH/2, esc(c.YLabel))
	for si, s := range c.Series {
		var pts []string
		var dots strings.Builder
		for i, v := range s.Y {
			if i >= len(c.X) || !(v > 0) || math.IsInf(v, 0) {
				continue
			}
			x, y := xAt(i), yAt(v)
			pts = append(pts, fmt.Sprintf("%.1f,%.1f", x, y))
			fmt.Fprintf(&dots, `<circle cx="%.1f" cy="%.1f" r="3" fill="%s"><title>%s: %s</title></circle>`, x, y, esc(s.Color), esc(s.Name), esc(rate(v)))
		}
		dash := ""
		if s.Dashed {
			dash = ` stroke-dasharray="6 4"`
		}
		fmt.Fprintf(&b, `<g><polyline class="series" data-series="%s" points="%s" fill="none" stroke="%s" stroke-width="2"%s/>%s</g>`+"\n",
			esc(s.Name), strings.Join(pts, " "), esc(s.Color), dash, dots.String())
		ly := chartTop + 10 + 20*float64(si)
		lx := chartLeft + chartPlotW + 14
		fmt.Fprintf(&b, `<line x1="%g" y1="%g" x2="%g" y2="%g" stroke="%s" stroke-width="2"%s/>`+"\n", lx, ly, lx+24, ly, esc(s.Color), dash)
		fmt.Fprintf(&b, `<text x="%g" y="%g" dominant-baseline="middle">%s</text>`+"\n", lx+30, ly, esc(s.Name))
	}
	b.WriteString("</svg>\n")
	_, err := w.Write(b.Bytes())
	return err
}

// esc escapes s for XML text and attribute values.
func esc(s string) string {
	var b strings.Builder
	_ = xml.EscapeText(&b, []byte(s))
	return b.String()
}

// humanCount renders a power of ten compactly: 100, 1k, 10k, 1M.
func humanCount(v float64) string {
	switch {
	case v >= 1e6:
		return strconv.FormatFloat(v/1e6, 'g', -1, 64) + "M"
	case v >= 1e3:
		return strconv.FormatFloat(v/1e3, 'g', -1, 64) + "k"
	default:
		return strconv.FormatFloat(v, 'g', -1, 64)
	}
}

// ScaleChart is the chart of a scale run: for every concurrency the rate
// of each idem path (solid) and of its plain baseline (dashed, the same
// colour).
func ScaleChart(r ScaleReport) Chart {
	c := Chart{
		Title:  fmt.Sprintf("idem bench --scale (%s): throughput by concurrency", r.Store),
		XLabel: "concurrent workers (inbox) / clients (HTTP)",
		YLabel: "operations/s (log scale)",
	}
	for _, row := range r.Rows {
		c.X = append(c.X, strconv.Itoa(row.Workers))
	}
	line := func(name, key, color string, baseline bool) ChartSeries {
		s := ChartSeries{Name: name, Color: color, Dashed: baseline}
		for _, row := range r.Rows {
			v := math.NaN()
			if x, ok := row.Pairs[key]; ok {
				v = x.APerS
				if baseline {
					v = x.BPerS
				}
			}
			s.Y = append(s.Y, v)
		}
		return s
	}
	c.Series = []ChartSeries{
		line("inbox BatchHandler (100/tx)", ScaleInboxBatchHandler, "#2ca02c", false),
		line("inbox Process (1/tx)", ScaleInbox, "#1f77b4", false),
		line("plain INSERT tx", ScaleInbox, "#1f77b4", true),
		line("HTTP Idempotency-Key", ScaleHTTP, "#d62728", false),
		line("HTTP plain handler", ScaleHTTP, "#d62728", true),
	}
	return c
}
