package bench

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"strings"
	"testing"
	"time"
)

// TestRunSoak runs the reference system for real under the soak's 32
// clients for two seconds on SQLite and, when IDEM_TEST_POSTGRES_URL is
// set, on PostgreSQL (IDEM_TEST_NATS_URL, when set, is the broker; else an
// embedded JetStream), and checks every field of the report: orders were
// accepted, none failed, every one was invoiced and e-mailed exactly once.
func TestRunSoak(t *testing.T) {
	if testing.Short() {
		t.Skip("runs the reference system")
	}
	ctx := context.Background()
	cfg := Config{SQLiteDir: t.TempDir(), Postgres: os.Getenv("IDEM_TEST_POSTGRES_URL"), NATS: os.Getenv("IDEM_TEST_NATS_URL")}
	want := []string{"sqlite"}
	if cfg.Postgres != "" {
		want = append(want, "postgres")
	} else {
		t.Log("IDEM_TEST_POSTGRES_URL not set: the soak runs on SQLite only")
	}
	e, err := Open(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	rep, err := e.RunSoak(ctx, SoakOptions{Duration: 2 * time.Second, Wait: 2 * time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	if len(rep.Results) != len(want) {
		t.Fatalf("%d results, want %v", len(rep.Results), want)
	}
	for i, r := range rep.Results {
		if r.Store != want[i] || r.Clients != soakClients || r.DurationS <= 0 {
			t.Errorf("result %d: %+v, want store %s, %d clients", i, r, want[i], soakClients)
		}
		if r.OrdersAccepted <= 0 || r.Status5xx != 0 || r.OtherFailures != 0 {
			t.Errorf("%s: %d accepted, %d 5xx, %d other, want orders and no failure", r.Store, r.OrdersAccepted, r.Status5xx, r.OtherFailures)
		}
		if r.OrdersInvoiced != r.OrdersAccepted || r.EmailsSent != r.OrdersAccepted {
			t.Errorf("%s: %d accepted, %d invoiced, %d e-mails, want all invoiced and e-mailed once", r.Store, r.OrdersAccepted, r.OrdersInvoiced, r.EmailsSent)
		}
		if r.DrainS < 0 || r.InvoicedAfterS < 0 {
			t.Errorf("%s: drained after %v s, invoiced after %v s, want both reached", r.Store, r.DrainS, r.InvoicedAfterS)
		}
		if r.UnscheduledAtEnd < 0 || r.UnscheduledAtEnd > r.EmailBacklog {
			t.Errorf("%s: %d unscheduled of a backlog of %d", r.Store, r.UnscheduledAtEnd, r.EmailBacklog)
		}
		if r.EmailBacklog < 0 || r.EmailBacklog > r.OrdersAccepted {
			t.Errorf("%s: e-mail backlog %d of %d orders", r.Store, r.EmailBacklog, r.OrdersAccepted)
		}
		if r.OrdersPerS <= 0 {
			t.Errorf("%s: %v orders/s", r.Store, r.OrdersPerS)
		}
		if r.UnpublishedAtEnd < 0 || r.UnpublishedAtEnd > r.OrdersAccepted || r.UninvoicedAtEnd < 0 || r.UninvoicedAtEnd > r.OrdersAccepted {
			t.Errorf("%s: %d unpublished, %d unscheduled, %d uninvoiced at the end", r.Store, r.UnpublishedAtEnd, r.UnscheduledAtEnd, r.UninvoicedAtEnd)
		}
		// Every order was e-mailed and invoiced: each passed every stage.
		if len(r.Stages) != len(soakHops) {
			t.Fatalf("%s: %d stages, want %d", r.Store, len(r.Stages), len(soakHops))
		}
		for _, sg := range r.Stages {
			if int64(sg.Orders) != r.OrdersAccepted || sg.P50S > sg.P99S || sg.P99S > sg.MaxS {
				t.Errorf("%s: stage %+v, want all %d orders and p50 <= p99 <= max", r.Store, sg, r.OrdersAccepted)
			}
			if sg.From == "accepted" && (sg.P50S <= 0 || sg.DoneAfterS < 0) {
				t.Errorf("%s: stage %+v: an order reached %s before it was accepted", r.Store, sg, sg.To)
			}
		}
	}
	var table, js bytes.Buffer
	if err := WriteSoakTable(&table, rep); err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(table.String()), "\n")
	if len(lines) != 1+len(want) || !strings.HasPrefix(lines[1], "sqlite ") {
		t.Fatalf("table:\n%s", table.String())
	}
	if err := WriteSoakJSON(&js, rep); err != nil {
		t.Fatal(err)
	}
	var fields struct {
		Results []map[string]any `json:"results"`
	}
	if err := json.Unmarshal(js.Bytes(), &fields); err != nil || len(fields.Results) != len(want) {
		t.Fatalf("JSON %s: %v", js.String(), err)
	}
	for _, k := range []string{"store", "clients", "duration_s", "orders_accepted", "orders_per_s", "status_5xx", "other_failures",
		"orders_invoiced", "emails_sent", "email_backlog", "unscheduled_at_end", "emails_per_s_after", "invoiced_after_s", "drain_s", "target_met",
		"unpublished_at_end", "uninvoiced_at_end", "stages"} {
		if _, ok := fields.Results[0][k]; !ok {
			t.Errorf("JSON field %q missing: %s", k, js.String())
		}
	}
}
