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
	"strconv"
	"sync"
	"sync/atomic"
	"text/tabwriter"
	"time"

	"github.com/idemkit/idem/boxoffice"
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
	// the clients stopped (how far the effect worker fell behind).
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
				opt.Progress(fmt.Sprintf("soak %s: %.0fs, %d orders accepted, %d 5xx", storeName, time.Since(start).Seconds(), accepted.Load(), fivexx.Load()))
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
	if st, err := sys.Stats(ctx); err == nil {
		res.EmailBacklog = res.OrdersAccepted - st.EmailsSent
		res.UnscheduledAtEnd = res.OrdersAccepted - st.EmailsScheduled
	} else {
		return res, err
	}
	opt.Progress(fmt.Sprintf("soak %s: clients done, %d orders accepted (%.0f/s), %d not yet e-mailed (%d not yet scheduled); waiting for invoices and e-mails",
		storeName, res.OrdersAccepted, res.OrdersPerS, res.EmailBacklog, res.UnscheduledAtEnd))
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
			if sent := res.EmailBacklog - (res.OrdersAccepted - st.EmailsSent); sent > 0 {
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
	if err := sys.Close(); err != nil {
		return res, fmt.Errorf("close the system: %w", err)
	}
	return res, nil
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
