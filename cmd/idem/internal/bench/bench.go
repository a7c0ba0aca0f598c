// Package bench is the harness behind "idem bench": it measures what idem's
// guarantees cost as ratios against a plain baseline doing the same work,
// and how idem compares with a peer library, in one interleaved run.
//
// A [Pair] has two sides, A (usually idem) and B (the baseline or the
// peer). [Run] executes A B A B … for at least three rounds, so a machine
// that gets slower or faster during the run affects both sides alike, takes
// the median rate of each side and reports A/B as the ratio. Every side
// round is given the same time budget; a side either works until the budget
// is spent (throughput) or does a fixed amount of work and reports how long
// it took.
//
// The harness itself (this file, stats.go, report.go) needs no servers; the
// pairs in the other files run against SQLite, PostgreSQL and JetStream.
package bench

import (
	"context"
	"errors"
	"fmt"
	"time"
)

// Sample is what one side measured in one round.
type Sample struct {
	// Ops is the number of operations (messages, requests, events) done.
	Ops int
	// Elapsed is the time the Ops took.
	Elapsed time.Duration
	// Latencies are optional per-operation latencies (e.g. commit to
	// publish); the pair's result reports their p50 and p99.
	Latencies []time.Duration
	// Extra holds a side's further measurements by name (e.g. WAL bytes
	// written); the pair's result reports the median of each across the
	// rounds, prefixed with "a_" or "b_".
	Extra map[string]float64
}

// PerSecond returns Ops/Elapsed, or 0 when nothing was timed.
func (s Sample) PerSecond() float64 {
	if s.Elapsed <= 0 {
		return 0
	}
	return float64(s.Ops) / s.Elapsed.Seconds()
}

// Side is one side of a pair.
type Side struct {
	// Label names the side in the output ("inbox", "plain", "watermill").
	Label string
	// Run performs one round. budget is the time the round should take;
	// a throughput side works until it is spent, a fixed-work side sizes
	// its work from it.
	Run func(ctx context.Context, budget time.Duration) (Sample, error)
}

// Pair is one comparison: side A against side B, reported as A/B.
type Pair struct {
	// Name identifies the pair in the output, e.g. "inbox_vs_plain_1w_sqlite".
	Name string
	A, B Side
	// Setup, when set, runs once before the first round.
	Setup func(ctx context.Context) error
	// Close, when set, runs once after the last round (also after a failure).
	Close func() error
	// Weight scales the pair's share of the time budget. Defaults to 1.
	Weight float64
}

// Result is the outcome of one pair; its JSON form is the --json output.
type Result struct {
	Name   string  `json:"name"`
	A      string  `json:"a"`
	B      string  `json:"b"`
	APerS  float64 `json:"a_per_s"`
	BPerS  float64 `json:"b_per_s"`
	Ratio  float64 `json:"ratio"`
	Rounds int     `json:"rounds"`
	// P50Ms and P99Ms are latency percentiles in milliseconds, present
	// only for pairs that measure latency (side A's samples).
	P50Ms *float64 `json:"p50_ms,omitempty"`
	P99Ms *float64 `json:"p99_ms,omitempty"`
	// Extra is the median of each of the sides' Sample.Extra, keyed
	// "a_<name>" / "b_<name>" (absent when no side records any).
	Extra map[string]float64 `json:"extra,omitempty"`
}

// Report is the whole run.
type Report struct {
	Results []Result `json:"results"`
}

// Progress is one step of a run, passed to Options.Progress.
type Progress struct {
	Pair      string // pair name
	Index     int    // 1-based index of the pair
	Pairs     int    // number of pairs
	Round     int    // 1-based round
	Rounds    int    // rounds per pair
	Side      string // label of the side that just finished
	PerSecond float64
	Elapsed   time.Duration // since the run started
	Setup     bool          // the pair's setup is starting
	Err       error         // set when the pair failed
}

// Options configures Run.
type Options struct {
	// Rounds per pair. Defaults to 3; values below 3 are raised to 3.
	Rounds int
	// Budget is the total time a pair with Weight 1 gets, split evenly over
	// its 2×Rounds side rounds. Defaults to 10s.
	Budget time.Duration
	// Progress, when set, is called after every side round.
	Progress func(Progress)
	// KeepGoing makes Run continue with the next pair when one fails; the
	// failures are joined into the returned error. Defaults to false.
	KeepGoing bool
}

func (o Options) withDefaults() Options {
	if o.Rounds < 3 {
		o.Rounds = 3
	}
	if o.Budget <= 0 {
		o.Budget = 10 * time.Second
	}
	return o
}

// SideBudget is the budget of one side round of a pair of weight w.
func (o Options) SideBudget(w float64) time.Duration {
	o = o.withDefaults()
	if w <= 0 {
		w = 1
	}
	return time.Duration(float64(o.Budget) * w / float64(2*o.Rounds))
}

// Run executes every pair, interleaving the sides of each (A B A B …), and
// returns one Result per pair that completed. It stops at the first failing
// pair unless KeepGoing is set.
func Run(ctx context.Context, pairs []Pair, opt Options) (Report, error) {
	opt = opt.withDefaults()
	start := time.Now()
	rep := Report{Results: []Result{}}
	var errs []error
	for i, p := range pairs {
		res, err := runPair(ctx, p, i+1, len(pairs), start, opt)
		if err != nil {
			err = fmt.Errorf("%s: %w", p.Name, err)
			if opt.Progress != nil {
				opt.Progress(Progress{Pair: p.Name, Index: i + 1, Pairs: len(pairs), Err: err, Elapsed: time.Since(start)})
			}
			if !opt.KeepGoing || ctx.Err() != nil {
				return rep, err
			}
			errs = append(errs, err)
			continue
		}
		rep.Results = append(rep.Results, res)
	}
	return rep, errors.Join(errs...)
}

func runPair(ctx context.Context, p Pair, index, total int, start time.Time, opt Options) (res Result, err error) {
	if p.A.Run == nil || p.B.Run == nil {
		return res, errors.New("bench: pair without both sides")
	}
	if p.Close != nil {
		defer func() {
			if cerr := p.Close(); cerr != nil && err == nil {
				err = cerr
			}
		}()
	}
	if p.Setup != nil {
		if opt.Progress != nil {
			opt.Progress(Progress{Pair: p.Name, Index: index, Pairs: total, Rounds: opt.Rounds, Setup: true, Elapsed: time.Since(start)})
		}
		if err := p.Setup(ctx); err != nil {
			return res, fmt.Errorf("setup: %w", err)
		}
	}
	budget := opt.SideBudget(p.Weight)
	var a, b []Sample
	for r := 1; r <= opt.Rounds; r++ {
		for _, side := range []struct {
			s   Side
			out *[]Sample
		}{{p.A, &a}, {p.B, &b}} {
			if err := ctx.Err(); err != nil {
				return res, err
			}
			s, err := side.s.Run(ctx, budget)
			if err != nil {
				return res, fmt.Errorf("round %d %s: %w", r, side.s.Label, err)
			}
			*side.out = append(*side.out, s)
			if opt.Progress != nil {
				opt.Progress(Progress{Pair: p.Name, Index: index, Pairs: total, Round: r, Rounds: opt.Rounds,
					Side: side.s.Label, PerSecond: s.PerSecond(), Elapsed: time.Since(start)})
			}
		}
	}
	return Summarize(p.Name, p.A.Label, p.B.Label, a, b), nil
}

// Summarize turns the samples of both sides into a Result: the median rate
// of each side, the ratio of the medians (A/B, 0 when B is 0), and the p50
// and p99 of side A's latencies when it recorded any.
func Summarize(name, labelA, labelB string, a, b []Sample) Result {
	ra, rb := rates(a), rates(b)
	res := Result{Name: name, A: labelA, B: labelB, APerS: Median(ra), BPerS: Median(rb), Rounds: min(len(a), len(b))}
	if res.BPerS > 0 {
		res.Ratio = res.APerS / res.BPerS
	}
	var lat []float64
	for _, s := range a {
		for _, l := range s.Latencies {
			lat = append(lat, float64(l)/float64(time.Millisecond))
		}
	}
	if len(lat) > 0 {
		p50, p99 := Percentile(lat, 50), Percentile(lat, 99)
		res.P50Ms, res.P99Ms = &p50, &p99
	}
	for prefix, samples := range map[string][]Sample{"a_": a, "b_": b} {
		byName := map[string][]float64{}
		for _, s := range samples {
			for k, v := range s.Extra {
				byName[k] = append(byName[k], v)
			}
		}
		for k, vs := range byName {
			if res.Extra == nil {
				res.Extra = map[string]float64{}
			}
			res.Extra[prefix+k] = Median(vs)
		}
	}
	return res
}

func rates(s []Sample) []float64 {
	out := make([]float64, len(s))
	for i, x := range s {
		out[i] = x.PerSecond()
	}
	return out
}
