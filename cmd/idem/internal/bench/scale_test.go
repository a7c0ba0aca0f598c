package bench

import (
	"bytes"
	"context"
	"encoding/json"
	"encoding/xml"
	"errors"
	"io"
	"math"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"
)

// svgPolylines parses doc as XML and returns the data-series and the
// number of points of every <polyline class="series">.
func svgPolylines(t *testing.T, doc []byte) (names []string, points []int) {
	t.Helper()
	dec := xml.NewDecoder(bytes.NewReader(doc))
	root := true
	for {
		tok, err := dec.Token()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatalf("the SVG is not well-formed XML: %v\n%s", err, doc)
		}
		se, ok := tok.(xml.StartElement)
		if !ok {
			continue
		}
		if root {
			if se.Name.Local != "svg" || se.Name.Space != "http://www.w3.org/2000/svg" {
				t.Fatalf("root element %v, want svg in the SVG namespace", se.Name)
			}
			root = false
		}
		if se.Name.Local != "polyline" {
			continue
		}
		attr := map[string]string{}
		for _, a := range se.Attr {
			attr[a.Name.Local] = a.Value
		}
		if attr["class"] != "series" {
			continue
		}
		names = append(names, attr["data-series"])
		points = append(points, len(strings.Fields(attr["points"])))
	}
	return names, points
}

// TestScaleChartSVG: the chart of a scale report is an SVG document with
// one polyline per series (every idem path and its plain baseline), each
// with a point per concurrency, and a skipped point where a pair failed.
func TestScaleChartSVG(t *testing.T) {
	t.Parallel()
	rep := ScaleReport{Store: "postgres"}
	for i, w := range ScaleLevels() {
		f := float64(i + 1)
		row := ScaleRow{Workers: w, Pairs: map[string]Result{
			ScaleInbox:             {APerS: 900 * f, BPerS: 1000 * f, Ratio: 0.9},
			ScaleInboxBatchHandler: {APerS: 20000 * f, BPerS: 1000 * f, Ratio: 20},
		}}
		if w != 8 { // the HTTP pair "failed" at 8
			row.Pairs[ScaleHTTP] = Result{APerS: 500 * f, BPerS: 800 * f, Ratio: 0.625}
		}
		rep.Rows = append(rep.Rows, row)
	}
	var buf bytes.Buffer
	if err := ScaleChart(rep).WriteSVG(&buf); err != nil {
		t.Fatal(err)
	}
	names, points := svgPolylines(t, buf.Bytes())
	want := []string{"inbox BatchHandler (100/tx)", "inbox Process (1/tx)", "plain INSERT tx", "HTTP Idempotency-Key", "HTTP plain handler"}
	if !slices.Equal(names, want) {
		t.Fatalf("series %q, want %q", names, want)
	}
	n := len(ScaleLevels())
	if wantPts := []int{n, n, n, n - 1, n - 1}; !slices.Equal(points, wantPts) {
		t.Fatalf("points per series %v, want %v", points, wantPts)
	}
	for _, w := range ScaleLevels() {
		if !bytes.Contains(buf.Bytes(), []byte(">"+strconv.Itoa(w)+"</text>")) {
			t.Errorf("no x label %d in the chart", w)
		}
	}
}

// TestRunScaleSQLite runs the scale pairs for real on SQLite at two
// concurrencies and checks the table and the JSON: a row per level, every
// pair with both sides measured, the chart a series per line.
func TestRunScaleSQLite(t *testing.T) {
	if testing.Short() {
		t.Skip("runs the scale pairs")
	}
	ctx := context.Background()
	e, err := Open(ctx, Config{SQLiteDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	levels := []int{1, 4}
	rep, err := e.RunScale(ctx, levels, Options{Budget: 600 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	if rep.Store != "sqlite" || len(rep.Rows) != len(levels) {
		t.Fatalf("report %+v, want sqlite with %d rows", rep, len(levels))
	}
	for i, row := range rep.Rows {
		if row.Workers != levels[i] {
			t.Errorf("row %d: workers %d, want %d", i, row.Workers, levels[i])
		}
		for _, k := range scaleColumns() {
			r, ok := row.Pairs[k]
			if !ok || r.APerS <= 0 || r.BPerS <= 0 || r.Rounds != 3 || math.Abs(r.Ratio-r.APerS/r.BPerS) > 1e-9 {
				t.Errorf("row %d pair %s: %+v (present %v), want both sides measured over 3 rounds", i, k, r, ok)
			}
		}
	}
	var table bytes.Buffer
	if err := WriteScaleTable(&table, rep); err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(table.String()), "\n")
	if len(lines) != 1+len(levels)+1 { // header, one per level, the legend
		t.Fatalf("table has %d lines, want %d:\n%s", len(lines), len(levels)+2, table.String())
	}
	for i, w := range levels {
		if f := strings.Fields(lines[1+i]); len(f) != 10 || f[0] != strconv.Itoa(w) {
			t.Errorf("table row %q, want workers %d and 9 figures", lines[1+i], w)
		}
	}
	var js bytes.Buffer
	if err := WriteScaleJSON(&js, rep); err != nil {
		t.Fatal(err)
	}
	var back ScaleReport
	if err := json.Unmarshal(js.Bytes(), &back); err != nil || len(back.Rows) != len(levels) || back.Rows[1].Pairs[ScaleHTTP].APerS != rep.Rows[1].Pairs[ScaleHTTP].APerS {
		t.Fatalf("JSON round trip: %v %+v", err, back)
	}
	var svg bytes.Buffer
	if err := ScaleChart(rep).WriteSVG(&svg); err != nil {
		t.Fatal(err)
	}
	if _, points := svgPolylines(t, svg.Bytes()); !slices.Equal(points, []int{2, 2, 2, 2, 2}) {
		t.Fatalf("points per series %v, want 2 each", points)
	}
}
