package console

import (
	"context"
	"fmt"
	"html/template"
	"net/http"
	"sort"
	"strings"
	"time"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/dlq"
	"github.com/idemkit/idem/effect"
	"github.com/idemkit/idem/idemhttp"
	"github.com/idemkit/idem/idemmetrics"
	"github.com/idemkit/idem/internal/operator"
	"github.com/idemkit/idem/saga"
)

// sample is one point of the overview's charts.
type sample struct {
	At                    time.Time
	DeadParked            float64
	OutboxLag             float64 // seconds
	OutboxPending         float64
	OutboxParked          float64
	HeldKeys, HeldEffects float64
	Duplicates, Conflicts float64
	countersKnown         bool
}

// Overview is the overview page's numbers.
type Overview struct {
	Stats       idemmetrics.Stats
	HeldKeys    int64
	HeldEffects int64
	// HeldSagas counts sagas in state held (a compensation failed);
	// SagasKnown is false without the sagas table (0008_sagas).
	HeldSagas  int64
	SagasKnown bool
	// Duplicates and Conflicts are the sums of
	// idem_duplicates_suppressed_total and idem_fingerprint_conflicts_total
	// in Config.Gatherer; CountersKnown is false without one.
	Duplicates, Conflicts float64
	CountersKnown         bool
	// ConflictLetters counts dead letters of class fingerprint_mismatch
	// (any state): message ids reused with a different payload, as the
	// consumers dead-lettered them. Known without a Gatherer.
	ConflictLetters int64
	// InboxStates counts inbox rows by state.
	InboxStates map[string]int64
}

// chartWindow is how far back the charts reach.
const chartWindow = time.Hour

// maxSamples bounds the samples kept (page loads sample too).
const maxSamples = 3600

// Sample reads the overview's numbers now, keeps them for the charts (the
// last hour) and returns them.
func (c *Console[TTx]) Sample(ctx context.Context) (Overview, error) {
	now := c.now()
	var o Overview
	var err error
	if o.Stats, err = idemmetrics.Snapshot(ctx, c.d, now); err != nil {
		return o, err
	}
	o.HeldKeys = o.Stats.HTTPKeys.By[string(idemhttp.StateFailed)] // held for reconciliation
	if ok, _ := tableExists(ctx, c.d, "effects"); ok {
		// In progress with the lease ended (held ones included: they have
		// no lease), and failed.
		if o.HeldEffects, err = operator.EffectCountAbandoned(ctx, c.d, now); err != nil {
			return o, err
		}
		o.HeldEffects += o.Stats.Effects.By[string(effect.Failed)]
	}
	if ok, _ := c.sagasOn(ctx); ok {
		n, err := c.sagas.Counts(ctx)
		if err != nil {
			return o, err
		}
		o.HeldSagas, o.SagasKnown = n[saga.Held], true
	}
	if ok, _ := tableExists(ctx, c.d, "inbox"); ok {
		if o.InboxStates, err = operator.InboxCounts(ctx, c.d); err != nil {
			return o, err
		}
	}
	if ok, _ := tableExists(ctx, c.d, "dead_letters"); ok {
		if o.ConflictLetters, err = operator.DLQCountClass(ctx, c.d, idem.ErrorClass(idem.ErrFingerprintMismatch)); err != nil {
			return o, err
		}
	}
	if g := c.cfg.Gatherer; g != nil {
		mfs, err := g.Gather()
		if err == nil {
			o.CountersKnown = true
			for _, mf := range mfs {
				var sum float64
				for _, m := range mf.GetMetric() {
					sum += m.GetCounter().GetValue()
				}
				switch mf.GetName() {
				case "idem_duplicates_suppressed_total":
					o.Duplicates = sum
				case "idem_fingerprint_conflicts_total":
					o.Conflicts = sum
				}
			}
		}
	}
	s := sample{At: now, DeadParked: float64(o.Stats.DeadLetters.By[string(dlq.Parked)]), OutboxLag: o.Stats.Outbox.LagSeconds,
		OutboxPending: float64(o.Stats.Outbox.Pending), OutboxParked: float64(o.Stats.Outbox.Parked),
		HeldKeys: float64(o.HeldKeys), HeldEffects: float64(o.HeldEffects), Duplicates: o.Duplicates, Conflicts: o.Conflicts,
		countersKnown: o.CountersKnown}
	c.mu.Lock()
	c.samples = append(c.samples, s)
	cut := 0
	for cut < len(c.samples) && now.Sub(c.samples[cut].At) > chartWindow {
		cut++
	}
	cut = max(cut, len(c.samples)-maxSamples)
	c.samples = append([]sample(nil), c.samples[cut:]...)
	c.mu.Unlock()
	return o, nil
}

// chart is one small chart of the overview.
type chart struct {
	Title  string
	TestID string
	Last   string
	Max    string
	SVG    template.HTML
}

func (c *Console[TTx]) charts(now time.Time) []chart {
	c.mu.Lock()
	ss := append([]sample(nil), c.samples...)
	c.mu.Unlock()
	type series struct {
		title, id string
		get       func(sample) float64
		unit      string
		counter   bool
	}
	all := []series{
		{"Dead letters parked", "chart-dlq", func(s sample) float64 { return s.DeadParked }, "", false},
		{"Outbox lag", "chart-outbox-lag", func(s sample) float64 { return s.OutboxLag }, "s", false},
		{"Outbox pending", "chart-outbox-pending", func(s sample) float64 { return s.OutboxPending }, "", false},
		{"Held keys + effects", "chart-held", func(s sample) float64 { return s.HeldKeys + s.HeldEffects }, "", false},
		{"Duplicates suppressed", "chart-duplicates", func(s sample) float64 { return s.Duplicates }, "", true},
		{"Fingerprint conflicts", "chart-conflicts", func(s sample) float64 { return s.Conflicts }, "", true},
	}
	var out []chart
	for _, se := range all {
		var pts []point
		for _, s := range ss {
			if se.counter && !s.countersKnown {
				continue
			}
			pts = append(pts, point{s.At, se.get(s)})
		}
		if se.counter && len(pts) == 0 {
			continue
		}
		ch := chart{Title: se.title, TestID: se.id, SVG: sparkline(pts, now)}
		if len(pts) > 0 {
			mx := 0.0
			for _, p := range pts {
				mx = max(mx, p.v)
			}
			ch.Last, ch.Max = num(pts[len(pts)-1].v)+se.unit, num(mx)+se.unit
		}
		out = append(out, ch)
	}
	return out
}

type point struct {
	t time.Time
	v float64
}

func num(v float64) string {
	if v == float64(int64(v)) {
		return fmt.Sprintf("%d", int64(v))
	}
	return fmt.Sprintf("%.1f", v)
}

// sparkline draws pts over the last hour as an inline SVG. Only numbers
// computed here go into it, so it is safe as template.HTML.
func sparkline(pts []point, now time.Time) template.HTML {
	const w, h, pad = 300.0, 56.0, 4.0
	var b strings.Builder
	fmt.Fprintf(&b, `<svg class="spark" viewBox="0 0 %.0f %.0f" width="%.0f" height="%.0f" role="img" aria-label="last hour">`, w, h+14, w, h+14)
	fmt.Fprintf(&b, `<line x1="0" y1="%.1f" x2="%.0f" y2="%.1f" class="axis"/>`, h-pad, w, h-pad)
	if len(pts) > 0 {
		mx := 0.0
		for _, p := range pts {
			mx = max(mx, p.v)
		}
		if mx == 0 {
			mx = 1
		}
		start := now.Add(-chartWindow)
		xy := func(p point) (float64, float64) {
			x := float64(p.t.Sub(start)) / float64(chartWindow) * w
			y := h - pad - p.v/mx*(h-2*pad)
			return min(max(x, 0), w), y
		}
		var coords []string
		for _, p := range pts {
			x, y := xy(p)
			coords = append(coords, fmt.Sprintf("%.1f,%.1f", x, y))
		}
		if len(coords) == 1 {
			x, y := xy(pts[0])
			fmt.Fprintf(&b, `<circle cx="%.1f" cy="%.1f" r="3" class="dot"/>`, x, y)
		} else {
			fmt.Fprintf(&b, `<polyline points="%s" class="line"/>`, strings.Join(coords, " "))
			x, y := xy(pts[len(pts)-1])
			fmt.Fprintf(&b, `<circle cx="%.1f" cy="%.1f" r="2.5" class="dot"/>`, x, y)
		}
	}
	fmt.Fprintf(&b, `<text x="0" y="%.0f" class="tick">−60 min</text><text x="%.0f" y="%.0f" class="tick end">now</text>`, h+12, w, h+12)
	b.WriteString(`</svg>`)
	return template.HTML(b.String()) // #nosec: numbers only
}

// kv is one row of a count table.
type kv struct {
	K string
	V int64
}

func sortedCounts(m map[string]int64) []kv {
	out := make([]kv, 0, len(m))
	for k, v := range m {
		out = append(out, kv{k, v})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].K < out[j].K })
	return out
}

func (c *Console[TTx]) overview(w http.ResponseWriter, r *http.Request) {
	o, err := c.Sample(r.Context())
	if err != nil {
		c.renderError(w, r, http.StatusInternalServerError, "Overview", err.Error())
		return
	}
	st := o.Stats
	tables := []struct {
		Name  string
		Total int64
		By    []kv
	}{
		{"inbox (by consumer)", st.Inbox.Total, sortedCounts(st.Inbox.By)},
		{"inbox (by state)", st.Inbox.Total, sortedCounts(o.InboxStates)},
		{"idempotency_keys (by state)", st.HTTPKeys.Total, sortedCounts(st.HTTPKeys.By)},
		{"outbox (by state)", st.Outbox.Pending + st.Outbox.Published + st.Outbox.Parked,
			sortedCounts(map[string]int64{"pending": st.Outbox.Pending, "published": st.Outbox.Published, "parked": st.Outbox.Parked})},
		{"effects (by state)", st.Effects.Total, sortedCounts(st.Effects.By)},
		{"dead_letters (by state)", st.DeadLetters.Total, sortedCounts(st.DeadLetters.By)},
	}
	c.render(w, r, http.StatusOK, "overview", "Overview", map[string]any{
		"O": o, "Tables": tables, "Parked": sortedCounts(st.DeadParked.By), "NoID": sortedCounts(st.DeadNoID.By),
		"Lag": time.Duration(st.Outbox.LagSeconds * float64(time.Second)), "Charts": c.charts(c.now()),
		"Describe": c.cfg.Describe, "Missing": st.TablesMissing,
	})
}
