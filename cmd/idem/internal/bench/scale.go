package bench

import (
	"context"
	"errors"
	"fmt"
	"io"
	"text/tabwriter"

	"github.com/idemkit/idem/store"
)

// ScaleLevels are the concurrencies "idem bench --scale" measures: workers
// for the inbox pairs, HTTP clients for the HTTP pair.
func ScaleLevels() []int { return []int{1, 2, 4, 8, 16, 32} }

// The pairs of one scale row, by the name they carry in ScaleRow.Pairs.
const (
	ScaleInbox             = "inbox"               // Process per message vs the plain INSERT transaction
	ScaleInboxBatchHandler = "inbox_batch_handler" // ProcessBatchWithTx of 100 with one BatchHandler vs the plain INSERT transaction
	ScaleHTTP              = "http"                // the Idempotency-Key middleware vs the plain handler
)

// ScaleRow is one concurrency of a scale run: the interleaved result of
// each pair at that many concurrent workers (clients for HTTP), side A
// idem's, side B the plain baseline at the same concurrency.
type ScaleRow struct {
	Workers int               `json:"workers"`
	Pairs   map[string]Result `json:"pairs"`
}

// ScaleReport is a whole scale run; its JSON form is the --scale --json
// output.
type ScaleReport struct {
	// Store is the database the pairs ran on ("postgres" or "sqlite").
	Store string     `json:"store"`
	Rows  []ScaleRow `json:"rows"`
}

// scalePairs are the pairs of one concurrency on the run's main store
// (PostgreSQL when configured, else SQLite), in ScaleRow order.
func scalePairs[TTx any](e *Env, d store.Driver[TTx], storeName string, w int) []namedPair {
	plain := inboxVsPlain(e, d, storeName, w)
	bh := inboxBatchVsSingle(e, d, storeName, true, w)
	// The BatchHandler side against the plain baseline at the same
	// concurrency (the batch pair's own B is Process, one message per
	// transaction, which the inbox pair already measures).
	bhVsPlain := Pair{Name: fmt.Sprintf("inbox_batch_handler_vs_plain_%dw_%s", w, storeName),
		A: bh.A, B: plain.B,
		Setup: func(ctx context.Context) error {
			return errors.Join(plain.Setup(ctx), bh.Setup(ctx))
		},
	}
	plain.Name = fmt.Sprintf("inbox_vs_plain_%dw_%s", w, storeName)
	httpPair := httpPairs(e, d, storeName, w)[0]
	httpPair.Name = fmt.Sprintf("http_vs_plain_%dc_%s", w, storeName)
	return []namedPair{{ScaleInbox, plain}, {ScaleInboxBatchHandler, bhVsPlain}, {ScaleHTTP, httpPair}}
}

// namedPair is a pair and the key of its result in ScaleRow.Pairs.
type namedPair struct {
	key string
	p   Pair
}

// RunScale runs the scale pairs at every level of ScaleLevels (levels, when
// not empty) on the run's main store, each pair interleaved like [Run]
// with opt, and returns one row per level that completed.
func (e *Env) RunScale(ctx context.Context, levels []int, opt Options) (ScaleReport, error) {
	if len(levels) == 0 {
		levels = ScaleLevels()
	}
	rep := ScaleReport{Store: "sqlite", Rows: []ScaleRow{}}
	if e.hasPostgres() {
		rep.Store = "postgres"
	}
	var named []namedPair
	rowOf := map[string]int{}
	for i, w := range levels {
		var ps []namedPair
		if e.hasPostgres() {
			ps = scalePairs(e, e.pg, rep.Store, w)
		} else {
			ps = scalePairs(e, e.sqlite, rep.Store, w)
		}
		for _, np := range ps {
			rowOf[np.p.Name] = i
		}
		named = append(named, ps...)
		rep.Rows = append(rep.Rows, ScaleRow{Workers: w, Pairs: map[string]Result{}})
	}
	pairs := make([]Pair, len(named))
	keyOf := map[string]string{}
	for i, np := range named {
		pairs[i] = np.p
		keyOf[np.p.Name] = np.key
	}
	res, err := Run(ctx, pairs, opt)
	for _, r := range res.Results {
		rep.Rows[rowOf[r.Name]].Pairs[keyOf[r.Name]] = r
	}
	return rep, err
}

// scaleColumns are the table's pair columns, in order.
func scaleColumns() []string { return []string{ScaleInbox, ScaleInboxBatchHandler, ScaleHTTP} }

// WriteScaleTable writes r as an aligned table: one row per concurrency,
// for each pair idem's rate, the plain baseline's rate and their ratio.
func WriteScaleTable(w io.Writer, r ScaleReport) error {
	tw := tabwriter.NewWriter(w, 2, 4, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintf(tw, "WORKERS\t")
	for _, c := range scaleColumns() {
		fmt.Fprintf(tw, "%s/s\tplain/s\tratio\t", c)
	}
	fmt.Fprintln(tw)
	for _, row := range r.Rows {
		fmt.Fprintf(tw, "%d\t", row.Workers)
		for _, c := range scaleColumns() {
			x, ok := row.Pairs[c]
			if !ok {
				fmt.Fprint(tw, "-\t-\t-\t")
				continue
			}
			fmt.Fprintf(tw, "%s\t%s\t%.2f\t", rate(x.APerS), rate(x.BPerS), x.Ratio)
		}
		fmt.Fprintln(tw)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	_, err := fmt.Fprintf(w, "(%s; inbox: messages/s, one transaction per message; inbox_batch_handler: messages/s, 100 per transaction, one BatchHandler; http: requests/s; plain: the same work without idem at the same concurrency)\n", r.Store)
	return err
}

// WriteScaleJSON writes r as indented JSON followed by a newline.
func WriteScaleJSON(w io.Writer, r ScaleReport) error {
	return writeIndented(w, r)
}
