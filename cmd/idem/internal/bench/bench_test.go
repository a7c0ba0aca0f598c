package bench

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"
)

func TestMedianAndPercentile(t *testing.T) {
	t.Parallel()
	cases := []struct {
		in   []float64
		want float64
	}{
		{nil, 0},
		{[]float64{5}, 5},
		{[]float64{3, 1, 2}, 2},
		{[]float64{4, 1, 3, 2}, 2.5},
		{[]float64{10, 10, 1000, 9, 11}, 10},
	}
	for _, c := range cases {
		in := append([]float64(nil), c.in...)
		if got := Median(c.in); got != c.want {
			t.Errorf("Median(%v) = %v, want %v", c.in, got, c.want)
		}
		if !reflect.DeepEqual(in, c.in) {
			t.Errorf("Median modified its input: %v", c.in)
		}
	}
	xs := make([]float64, 100)
	for i := range xs {
		xs[i] = float64(100 - i) // 100 … 1
	}
	if got := Percentile(xs, 50); got != 50 {
		t.Errorf("p50 = %v, want 50", got)
	}
	if got := Percentile(xs, 99); got != 99 {
		t.Errorf("p99 = %v, want 99", got)
	}
	if got := Percentile(xs, 100); got != 100 {
		t.Errorf("p100 = %v, want 100", got)
	}
	if got := Percentile([]float64{7}, 99); got != 7 {
		t.Errorf("p99 of one = %v, want 7", got)
	}
}

func TestSummarize(t *testing.T) {
	t.Parallel()
	sec := time.Second
	a := []Sample{{Ops: 100, Elapsed: sec}, {Ops: 300, Elapsed: sec}, {Ops: 200, Elapsed: sec, Latencies: []time.Duration{time.Millisecond, 3 * time.Millisecond}}}
	b := []Sample{{Ops: 50, Elapsed: sec}, {Ops: 100, Elapsed: 2 * sec}, {Ops: 1000, Elapsed: sec}}
	r := Summarize("p", "x", "y", a, b)
	if r.APerS != 200 || r.BPerS != 50 || r.Ratio != 4 || r.Rounds != 3 {
		t.Fatalf("Summarize = %+v, want a=200 b=50 ratio=4 rounds=3", r)
	}
	if r.P50Ms == nil || *r.P50Ms != 1 || r.P99Ms == nil || *r.P99Ms != 3 {
		t.Fatalf("percentiles = %v %v, want 1 and 3", r.P50Ms, r.P99Ms)
	}
	z := Summarize("z", "x", "y", []Sample{{Ops: 1, Elapsed: sec}}, []Sample{{}})
	if z.Ratio != 0 || z.P50Ms != nil {
		t.Fatalf("zero baseline: %+v, want ratio 0 and no percentiles", z)
	}
}

// fakeSide records the order in which sides run and returns ops per second.
func fakeSide(label string, log *[]string, perSecond int) Side {
	return Side{Label: label, Run: func(ctx context.Context, budget time.Duration) (Sample, error) {
		*log = append(*log, label)
		return Sample{Ops: perSecond, Elapsed: time.Second}, nil
	}}
}

func TestRunInterleavesAndSummarizes(t *testing.T) {
	t.Parallel()
	var log []string
	var setup, closed int
	var budgets []time.Duration
	p := Pair{
		Name:  "demo",
		A:     fakeSide("a", &log, 300),
		B:     fakeSide("b", &log, 100),
		Setup: func(context.Context) error { setup++; return nil },
		Close: func() error { closed++; return nil },
	}
	inner := p.A.Run
	p.A.Run = func(ctx context.Context, budget time.Duration) (Sample, error) {
		budgets = append(budgets, budget)
		return inner(ctx, budget)
	}
	var steps []Progress
	rep, err := Run(context.Background(), []Pair{p}, Options{Rounds: 1, Budget: 6 * time.Second, Progress: func(pr Progress) { steps = append(steps, pr) }})
	if err != nil {
		t.Fatal(err)
	}
	if want := []string{"a", "b", "a", "b", "a", "b"}; !reflect.DeepEqual(log, want) {
		t.Fatalf("order = %v, want %v (at least 3 rounds, A B interleaved)", log, want)
	}
	if setup != 1 || closed != 1 {
		t.Fatalf("setup %d close %d, want 1 and 1", setup, closed)
	}
	for _, b := range budgets {
		if b != time.Second {
			t.Fatalf("side budget %v, want 6s / (2×3 rounds) = 1s", b)
		}
	}
	if len(rep.Results) != 1 || rep.Results[0].Ratio != 3 || rep.Results[0].Rounds != 3 {
		t.Fatalf("results = %+v, want one with ratio 3 over 3 rounds", rep.Results)
	}
	if len(steps) != 7 || !steps[0].Setup || steps[6].Round != 3 || steps[6].Side != "b" {
		t.Fatalf("progress steps = %+v", steps)
	}
}

func TestRunStopsOrKeepsGoing(t *testing.T) {
	t.Parallel()
	boom := errors.New("boom")
	var log []string
	closed := 0
	bad := Pair{Name: "bad", A: fakeSide("a", &log, 1), B: Side{Label: "b", Run: func(context.Context, time.Duration) (Sample, error) {
		return Sample{}, boom
	}}, Close: func() error { closed++; return nil }}
	good := Pair{Name: "good", A: fakeSide("a", &log, 2), B: fakeSide("b", &log, 1)}

	rep, err := Run(context.Background(), []Pair{bad, good}, Options{})
	if !errors.Is(err, boom) || len(rep.Results) != 0 || closed != 1 {
		t.Fatalf("stop: err %v, results %d, closed %d", err, len(rep.Results), closed)
	}
	rep, err = Run(context.Background(), []Pair{bad, good}, Options{KeepGoing: true})
	if !errors.Is(err, boom) || len(rep.Results) != 1 || rep.Results[0].Name != "good" {
		t.Fatalf("keep going: err %v, results %+v", err, rep.Results)
	}
}

func TestJSONShape(t *testing.T) {
	t.Parallel()
	p50, p99 := 1.5, 9.0
	rep := Report{Results: []Result{
		{Name: "inbox_vs_plain_1w_sqlite", A: "inbox", B: "plain", APerS: 900, BPerS: 1000, Ratio: 0.9, Rounds: 3},
		{Name: "outbox_relay_postgres", A: "relay", B: "direct", APerS: 3000, BPerS: 60000, Ratio: 0.05, Rounds: 3, P50Ms: &p50, P99Ms: &p99},
	}}
	var buf bytes.Buffer
	if err := WriteJSON(&buf, rep); err != nil {
		t.Fatal(err)
	}
	var doc map[string][]map[string]any
	if err := json.Unmarshal(buf.Bytes(), &doc); err != nil {
		t.Fatal(err)
	}
	if len(doc) != 1 || len(doc["results"]) != 2 {
		t.Fatalf("want only a results array of 2, got %s", buf.String())
	}
	want := []string{"a", "a_per_s", "b", "b_per_s", "name", "ratio", "rounds"}
	if got := keys(doc["results"][0]); !reflect.DeepEqual(got, want) {
		t.Fatalf("keys = %v, want %v", got, want)
	}
	if got := keys(doc["results"][1]); !reflect.DeepEqual(got, append(want[:5:5], "p50_ms", "p99_ms", "ratio", "rounds")) {
		t.Fatalf("keys with latency = %v", got)
	}
	buf.Reset()
	if err := WriteJSON(&buf, Report{}); err != nil || strings.TrimSpace(buf.String()) != `{
  "results": []
}` {
		t.Fatalf("empty report = %q, %v", buf.String(), err)
	}
	buf.Reset()
	if err := WriteTable(&buf, rep); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(buf.String(), "inbox_vs_plain_1w_sqlite") || !strings.Contains(buf.String(), "ratio ≥ 0.85 (met)") ||
		!strings.Contains(buf.String(), "MISSED") {
		t.Fatalf("table:\n%s", buf.String())
	}
}

func keys(m map[string]any) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}
