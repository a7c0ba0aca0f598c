package bench

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"text/tabwriter"
	"time"

	"github.com/idemkit/idem/cmd/idem/boxoffice"
	"github.com/idemkit/idem/store"
)

// soakClients is the number of concurrent HTTP clients of a soak.
const soakClients = 32

// soakEvents is the number of events the soak's orders take seats from
// (client i orders from event i mod soakEvents).
const soakEvents = 8

// SoakMaxDrain is the target of a soak: every e-mail sent within this time
// of the last accepted order.
const SoakMaxDrain = 10 * time.Second

// SoakResult is one soak of the reference system on one database.
type SoakResult struct {
	// Store is "sqlite" or "postgres".
	Store string `json:"store"`
	// Clients is the number of concurrent HTTP clients.
	Clients int `json:"clients"`
	// DurationS is how long the clients posted orders, in seconds.
	DurationS float64 `json:"duration_s"`
	// OrdersAccepted counts the POST /orders answered 201.
	OrdersAccepted int64 `json:"orders_accepted"`
	// OrdersPerS is OrdersAccepted per second of DurationS.
	OrdersPerS float64 `json:"orders_per_s"`
	// Status5xx counts the answers with a 5xx status.
	Status5xx int64 `json:"status_5xx"`
	// OtherFailures counts the requests that got neither 201 nor a 5xx
	// (transport errors, 4xx).
	OtherFailures int64 `json:"other_failures"`
	// OrdersInvoiced is the number of invoices when the soak ended.
	OrdersInvoiced int64 `json:"orders_invoiced"`
	// EmailsSent is the number of unique e-mails the provider received.
	EmailsSent int64 `json:"emails_sent"`
	// EmailBacklog is the number of accepted orders not yet e-mailed when
	// the clients stopped (how far the e-mails fell behind). It and the
	// other *AtEnd counts are taken from the orders' stage times
	// (boxoffice.System.OrderTimeline) once the soak is over, so they are
	// one consistent picture of that moment: an order's e-mail counts as
	// sent once its completion is recorded.
	EmailBacklog int64 `json:"email_backlog"`
	// UnscheduledAtEnd is the number of accepted orders whose e-mail
	// effect was not yet scheduled (by the notification consumer) when the
	// clients stopped: the part of EmailBacklog upstream of the effect
	// worker.
	UnscheduledAtEnd int64 `json:"unscheduled_at_end"`
	// EmailsPerSAfter is the rate at which e-mails were sent after the
	// clients stopped (until all were sent or the wait ended): the effect
	// worker's drain rate once the API is idle.
	EmailsPerSAfter float64 `json:"emails_per_s_after"`
	// InvoicedAfterS is the time from the last accepted order until every
	// accepted order was invoiced, in seconds (-1: not within the wait).
	InvoicedAfterS float64 `json:"invoiced_after_s"`
	// DrainS is the time from the last accepted order until every e-mail
	// was sent, in seconds (-1: not within the wait).
	DrainS float64 `json:"drain_s"`
	// TargetMet reports DrainS ≤ SoakMaxDrain with no 5xx and every order
	// invoiced and e-mailed.
	TargetMet bool `json:"target_met"`
	// UnpublishedAtEnd is the number of accepted orders whose
	// OrderConfirmed event the relay had not yet marked published when the
	// clients stopped (the relay marks a batch in the round trip after its
	// ack, so a consumer may have an event before it is marked).
	UnpublishedAtEnd int64 `json:"unpublished_at_end"`
	// UninvoicedAtEnd is the number of accepted orders not yet invoiced
	// when the clients stopped.
	UninvoicedAtEnd int64 `json:"uninvoiced_at_end"`
	// Stages are the lags of each hop of an order's confirmation e-mail
	// (and of its invoice), measured per order from the database's
	// timestamps once everything was sent: where the e-mails waited.
	Stages []SoakStage `json:"stages"`
}

// SoakStage is one hop of the orders' path in a soak, from the time each
// order reached stage From to the time it reached stage To (the stages of
// boxoffice.OrderTimes: accepted, published, notified, scheduled, sent,
// invoiced).
type SoakStage struct {
	// From and To name the hop's stages.
	From string `json:"from"`
	To   string `json:"to"`
	// Orders is the number of orders that passed both stages.
	Orders int `json:"orders"`
	// P50S, P99S and MaxS are the hop's lag over those orders, in seconds.
	P50S float64 `json:"p50_s"`
	P99S float64 `json:"p99_s"`
	MaxS float64 `json:"max_s"`
	// DoneAfterS is the time from the last accepted order until the last
	// order reached To, in seconds: when this stage caught up.
	DoneAfterS float64 `json:"done_after_s"`
}

// SoakReport is the --soak output: one result per database.
type SoakReport struct {
	Results []SoakResult `json:"results"`
}

// SoakOptions configures RunSoak.
type SoakOptions struct {
	// Duration is how long the clients post orders. Defaults to 60s.
	Duration time.Duration
	// Wait is the longest the soak waits, after the clients stop, for
	// every order to be invoiced and e-mailed. Defaults to 3 minutes.
	Wait time.Duration
	// Progress, when set, receives one line of status now and then.
	Progress func(string)
}

// RunSoak runs the reference system (package boxoffice, as "idem demo"
// does: HTTP API, relay, consumers, effect worker, fake e-mail provider) on
// the run's SQLite database and, when configured, on PostgreSQL in a schema
// of its own, with soakClients clients posting orders for opt.Duration,
// then waits until every accepted order is invoiced and e-mailed.
func (e *Env) RunSoak(ctx context.Context, opt SoakOptions) (SoakReport, error) {
	if opt.Duration <= 0 {
		opt.Duration = time.Minute
	}
	if opt.Wait <= 0 {
		opt.Wait = 3 * time.Minute
	}
	if opt.Progress == nil {
		opt.Progress = func(string) {}
	}
	rep := SoakReport{Results: []SoakResult{}}
	stores := []string{"sqlite"}
	if e.hasPostgres() {
		stores = append(stores, "postgres")
	}
	for _, st := range stores {
		r, err := e.soak(ctx, st, opt)
		if err != nil {
			return rep, fmt.Errorf("soak %s: %w", st, err)
		}
		rep.Results = append(rep.Results, r)
	}
	return rep, nil
}

// soak runs one soak on storeName.
func (e *Env) soak(ctx context.Context, storeName string, opt SoakOptions) (SoakResult, error) {
	res := SoakResult{Store: storeName, Clients: soakClients, InvoicedAfterS: -1, DrainS: -1}
	tag := e.name("soak")
	dir, err := os.MkdirTemp(e.sqliteDir, "soak-")
	if err != nil {
		return res, err
	}
	defer os.RemoveAll(dir)
	opts := boxoffice.Options{
		DataDir: dir,
		NATSURL: e.cfg.NATS,
		Stream:  "BENCH_" + e.runID + "_" + tag,
		Config: boxoffice.Config{
			WebhookSecrets: []string{"whsec_" + "YmVuY2gtc29hay1zZWNyZXQtbm90LXVzZWQ="},
			Seats:          1 << 40,
			Subject:        "bench." + e.runID + "." + tag + ".orders",
			DurableSuffix:  "_" + e.runID + "_" + tag,
			Logger:         e.log.With("soak", storeName),
		},
	}
	if storeName == "postgres" {
		opts.DatabaseURL = e.cfg.Postgres
		opts.Schema = e.name(e.schema + "_soak")
		e.extraSchemas = append(e.extraSchemas, opts.Schema)
	} else {
		opts.DatabaseURL = "sqlite://" + filepath.Join(dir, "boxoffice.db")
	}
	sys, err := boxoffice.Open(ctx, opts)
	if err != nil {
		return res, err
	}
	defer sys.Close()
	if err := sys.Start(ctx); err != nil {
		return res, err
	}
	url, stop, err := httpServer(sys.Handler())
	if err != nil {
		return res, err
	}
	defer func() { _ = stop() }()
	client := httpClient()
	defer client.CloseIdleConnections()

	var accepted, fivexx, other atomic.Int64
	var lastMu sync.Mutex
	var last time.Time
	var seq atomic.Int64
	start := time.Now()
	deadline := start.Add(opt.Duration)
	var wg sync.WaitGroup
	for c := range soakClients {
		wg.Go(func() {
			for time.Now().Before(deadline) && ctx.Err() == nil {
				n := seq.Add(1)
				status, err := postOrder(ctx, client, url, tag+"-"+strconv.FormatInt(n, 10), c%soakEvents)
				switch {
				case err != nil:
					other.Add(1)
				case status == http.StatusCreated:
					accepted.Add(1)
					now := time.Now()
					lastMu.Lock()
					if now.After(last) {
						last = now
					}
					lastMu.Unlock()
				case status >= 500:
					fivexx.Add(1)
				default:
					other.Add(1)
				}
			}
		})
	}
	tick := time.NewTicker(5 * time.Second)
	go func() {
		for {
			select {
			case <-tick.C:
				line := fmt.Sprintf("soak %s: %.0fs, %d orders accepted, %d 5xx", storeName, time.Since(start).Seconds(), accepted.Load(), fivexx.Load())
				if st, err := sys.Stats(ctx); err == nil {
					line += fmt.Sprintf("; %d published, %d notified, %d e-mails sent, %d invoiced", st.EventsPublished, st.Notifications, st.EmailsSent, st.Invoices)
				}
				opt.Progress(line)
			case <-ctx.Done():
				return
			}
			if !time.Now().Before(deadline) {
				return
			}
		}
	}()
	wg.Wait()
	tick.Stop()
	elapsed := time.Since(start)
	if err := ctx.Err(); err != nil {
		return res, err
	}
	res.DurationS = elapsed.Seconds()
	res.OrdersAccepted, res.Status5xx, res.OtherFailures = accepted.Load(), fivexx.Load(), other.Load()
	res.OrdersPerS = float64(res.OrdersAccepted) / elapsed.Seconds()
	// The backlogs at the end are counted from the orders' stage times
	// once the soak is over (one consistent picture); the progress line
	// shows the counts of the moment.
	endMicros := store.Micros(time.Now())
	st, err := sys.Stats(ctx)
	if err != nil {
		return res, err
	}
	sentAtEnd := st.EmailsSent
	opt.Progress(fmt.Sprintf("soak %s: clients done, %d orders accepted (%.0f/s), %d e-mails sent, %d scheduled, %d published, %d invoiced; waiting for invoices and e-mails",
		storeName, res.OrdersAccepted, res.OrdersPerS, st.EmailsSent, st.EmailsScheduled, st.EventsPublished, st.Invoices))
	waitStart := time.Now()
	until := waitStart.Add(opt.Wait)
	for {
		st, err := sys.Stats(ctx)
		if err != nil {
			return res, err
		}
		res.OrdersInvoiced, res.EmailsSent = st.Invoices, st.EmailsSent
		now := time.Now()
		if res.InvoicedAfterS < 0 && st.Invoices >= res.OrdersAccepted {
			res.InvoicedAfterS = now.Sub(last).Seconds()
		}
		if res.DrainS < 0 && st.EmailsSent >= res.OrdersAccepted {
			res.DrainS = now.Sub(last).Seconds()
		}
		if (res.InvoicedAfterS >= 0 && res.DrainS >= 0) || now.After(until) {
			if sent := st.EmailsSent - sentAtEnd; sent > 0 {
				res.EmailsPerSAfter = float64(sent) / now.Sub(waitStart).Seconds()
			}
			break
		}
		select {
		case <-ctx.Done():
			return res, ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
	}
	res.TargetMet = res.Status5xx == 0 && res.DrainS >= 0 && res.DrainS <= SoakMaxDrain.Seconds() &&
		res.OrdersInvoiced == res.OrdersAccepted && res.EmailsSent == res.OrdersAccepted
	tl, err := soakTimeline(ctx, sys, res.EmailsSent >= res.OrdersAccepted && res.OrdersInvoiced >= res.OrdersAccepted)
	if err != nil {
		return res, err
	}
	res.Stages = soakStages(tl)
	for _, t := range tl {
		after := func(at int64) int64 {
			if at == 0 || at > endMicros {
				return 1
			}
			return 0
		}
		res.EmailBacklog += after(t.Sent)
		res.UnscheduledAtEnd += after(t.Scheduled)
		res.UnpublishedAtEnd += after(t.Published)
		res.UninvoicedAtEnd += after(t.Invoiced)
	}
	opt.Progress(fmt.Sprintf("soak %s: when the clients stopped, %d orders were not yet e-mailed (%d not yet scheduled, %d not yet published), %d not yet invoiced",
		storeName, res.EmailBacklog, res.UnscheduledAtEnd, res.UnpublishedAtEnd, res.UninvoicedAtEnd))
	for _, sg := range res.Stages {
		opt.Progress(fmt.Sprintf("soak %s: %s -> %s: p50 %.2fs, p99 %.2fs, max %.2fs, caught up %.1fs after the last order (%d orders)",
			storeName, sg.From, sg.To, sg.P50S, sg.P99S, sg.MaxS, sg.DoneAfterS, sg.Orders))
	}
	if err := sys.Close(); err != nil {
		return res, fmt.Errorf("close the system: %w", err)
	}
	return res, nil
}

// soakTimeline reads the orders' stage times. When every order was
// e-mailed and invoiced it waits (briefly) for every stage of every order
// to be recorded too: the provider counts an e-mail when it receives the
// call, the worker records the completion just after, and the relay marks
// a batch published in the round trip after the broker's ack, by which
// time the consumers may have e-mailed and invoiced its orders.
func soakTimeline(ctx context.Context, sys *boxoffice.System[any], done bool) ([]boxoffice.OrderTimes, error) {
	until := time.Now().Add(10 * time.Second)
	for {
		tl, err := sys.OrderTimeline(ctx)
		if err != nil || !done || time.Now().After(until) {
			return tl, err
		}
		complete := true
		for _, t := range tl {
			if t.Accepted == 0 || t.Published == 0 || t.Notified == 0 || t.Scheduled == 0 || t.Sent == 0 || t.Invoiced == 0 {
				complete = false
				break
			}
		}
		if complete {
			return tl, nil
		}
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// soakHops are the hops SoakResult.Stages reports, in path order: the
// e-mail's (accepted -> published -> notified -> scheduled -> sent), the
// whole of it, and the invoice's.
var soakHops = []struct {
	from, to string
	at       func(boxoffice.OrderTimes) (from, to int64)
}{
	{"accepted", "published", func(t boxoffice.OrderTimes) (int64, int64) { return t.Accepted, t.Published }},
	{"published", "notified", func(t boxoffice.OrderTimes) (int64, int64) { return t.Published, t.Notified }},
	{"notified", "scheduled", func(t boxoffice.OrderTimes) (int64, int64) { return t.Notified, t.Scheduled }},
	{"scheduled", "sent", func(t boxoffice.OrderTimes) (int64, int64) { return t.Scheduled, t.Sent }},
	{"accepted", "sent", func(t boxoffice.OrderTimes) (int64, int64) { return t.Accepted, t.Sent }},
	{"published", "invoiced", func(t boxoffice.OrderTimes) (int64, int64) { return t.Published, t.Invoiced }},
}

// soakStages computes the lag of every hop of soakHops over the orders of
// tl that passed both of its stages. published -> notified can be slightly
// negative for some orders, and is reported as measured: the relay marks a
// batch published in the round trip after the broker's ack, by which time
// a consumer may have recorded the event.
func soakStages(tl []boxoffice.OrderTimes) []SoakStage {
	var last int64
	for _, t := range tl {
		last = max(last, t.Accepted)
	}
	out := make([]SoakStage, 0, len(soakHops))
	for _, h := range soakHops {
		sg := SoakStage{From: h.from, To: h.to}
		lags := make([]float64, 0, len(tl))
		var done int64
		for _, t := range tl {
			from, to := h.at(t)
			if from == 0 || to == 0 {
				continue
			}
			lags = append(lags, float64(to-from)/1e6)
			done = max(done, to)
		}
		sg.Orders = len(lags)
		if len(lags) > 0 {
			sg.P50S, sg.P99S, sg.MaxS = Percentile(lags, 50), Percentile(lags, 99), slices.Max(lags)
			sg.DoneAfterS = float64(done-last) / 1e6
		}
		out = append(out, sg)
	}
	return out
}

// postOrder posts one order with Idempotency-Key key for event soak-<event>
// and returns the status.
func postOrder(ctx context.Context, c *http.Client, url, key string, event int) (int, error) {
	body, _ := json.Marshal(boxoffice.OrderRequest{
		EventID: "soak-" + strconv.Itoa(event), CustomerEmail: "soak-" + key + "@example.com",
		Seats: 2, TotalCents: 9000, Currency: "EUR",
	})
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url+"/orders", bytes.NewReader(body))
	if err != nil {
		return 0, err
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Idempotency-Key", `"`+key+`"`)
	req.Header.Set("X-Tenant-ID", "bench")
	resp, err := c.Do(req)
	if err != nil {
		return 0, err
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return resp.StatusCode, nil
}

// WriteSoakTable writes r as an aligned table, one row per database.
func WriteSoakTable(w io.Writer, r SoakReport) error {
	tw := tabwriter.NewWriter(w, 2, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "STORE\tCLIENTS\tSECONDS\tACCEPTED\tORDERS/s\t5xx\tOTHER\tINVOICED\tE-MAILS\tBACKLOG AT END\tE-MAILS/s AFTER\tINVOICED AFTER s\tE-MAILS DRAINED AFTER s\tTARGET (≤ 10 s, 0 5xx, all sent)")
	for _, x := range r.Results {
		mark := "met"
		if !x.TargetMet {
			mark = "MISSED"
		}
		fmt.Fprintf(tw, "%s\t%d\t%.1f\t%d\t%.0f\t%d\t%d\t%d\t%d\t%d\t%.0f\t%s\t%s\t%s\n", x.Store, x.Clients, x.DurationS, x.OrdersAccepted,
			x.OrdersPerS, x.Status5xx, x.OtherFailures, x.OrdersInvoiced, x.EmailsSent, x.EmailBacklog, x.EmailsPerSAfter, secs(x.InvoicedAfterS), secs(x.DrainS), mark)
	}
	return tw.Flush()
}

// secs renders a duration in seconds, "never" for a negative one.
func secs(s float64) string {
	if s < 0 {
		return "never"
	}
	return fmt.Sprintf("%.1f", s)
}

// WriteSoakJSON writes r as indented JSON followed by a newline.
func WriteSoakJSON(w io.Writer, r SoakReport) error {
	if r.Results == nil {
		r.Results = []SoakResult{}
	}
	return writeIndented(w, r)
}
