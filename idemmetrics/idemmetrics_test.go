package idemmetrics_test

import (
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/dlq"
	"github.com/idemkit/idem/idemmetrics"
	"github.com/idemkit/idem/idemmetrics/idemmetricstest"
	"github.com/idemkit/idem/internal/testdb"
	"github.com/idemkit/idem/store"
)

func TestRuntimeMetrics(t *testing.T) {
	t.Parallel()
	reg := prometheus.NewRegistry()
	m, err := idemmetrics.New(reg, idemmetrics.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := idemmetrics.New(reg, idemmetrics.Options{}); err == nil {
		t.Fatal("registering twice on one registry succeeded")
	}
	m.Duplicate("consumer", "billing")
	m.Duplicate("consumer", "billing")
	m.FingerprintConflict("consumer", "billing")
	m.Processed("billing")
	m.Failed("billing", "transient")
	m.Retry("billing")
	m.DeadLettered("billing", "permanent")
	m.Unidentified("billing")
	m.ObserveVersionGuard("seats", "stale")
	m.GCDeleted("inbox", 5)
	m.EffectHeld("mail")
	ctx := context.Background()
	m.HTTPRequest(ctx, "executed")
	m.HTTPRequest(ctx, "replayed")
	m.HTTPRequest(ctx, "replayed")
	m.OutboxPublished(3)
	m.OutboxPublished(0)
	m.OutboxDuplicate(ctx)
	m.OutboxParked(ctx, "permanent")
	m.OutboxPublishDuration(20 * time.Millisecond)
	m.OutboxPublishDuration(30 * time.Millisecond)
	done := m.Start("billing")
	if v := value(t, reg, "idem_in_flight", "consumer=billing"); v != 1 {
		t.Fatalf("in flight = %v", v)
	}
	done()
	for _, c := range []struct {
		name, labels string
		want         float64
	}{
		{"idem_duplicates_suppressed_total", "component=consumer,consumer=billing", 2},
		{"idem_fingerprint_conflicts_total", "component=consumer,consumer=billing", 1},
		{"idem_messages_processed_total", "consumer=billing", 1},
		{"idem_messages_failed_total", "class=transient,consumer=billing", 1},
		{"idem_retries_total", "consumer=billing", 1},
		{"idem_dead_letters_total", "class=permanent,consumer=billing", 1},
		{"idem_messages_unidentified_total", "consumer=billing", 1},
		{"idem_version_guard_total", "result=stale,table=seats", 1},
		{"idem_gc_deleted_rows_total", "table=inbox", 5},
		{"idem_in_flight", "consumer=billing", 0},
		{"idem_handler_duration_seconds", "consumer=billing", 1}, // sample count
		{"idem_effects_held_total", "kind=mail", 1},
		{"idem_http_requests_total", "decision=executed", 1},
		{"idem_http_requests_total", "decision=replayed", 2},
		{"idem_outbox_published_total", "", 3},
		{"idem_outbox_duplicates_total", "", 1},
		{"idem_outbox_parked_total", "class=permanent", 1},
		{"idem_outbox_publish_duration_seconds", "", 2}, // sample count
	} {
		if v := value(t, reg, c.name, c.labels); v != c.want {
			t.Errorf("%s{%s} = %v, want %v", c.name, c.labels, v, c.want)
		}
	}
	// A nil *Metrics is a no-op.
	var nilM *idemmetrics.Metrics
	nilM.Processed("x")
	nilM.Start("x")()
	nilM.HTTPRequest(context.Background(), "executed")
	nilM.OutboxPublished(1)
	nilM.OutboxDuplicate(context.Background())
	nilM.OutboxParked(context.Background(), "permanent")
	nilM.OutboxPublishDuration(time.Second)
}

func TestDBCollector(t *testing.T) {
	t.Parallel()
	testdb.EachDriver(t, func(t *testing.T, e testdb.Driver) { testDBCollector(t, e.D) })
}

func testDBCollector[TTx any](t *testing.T, d store.Driver[TTx]) {
	ctx := context.Background()
	now := time.Now()
	letters, _ := dlq.New(d, dlq.Config{})
	for _, id := range []string{"a", "b"} {
		if _, err := letters.Park(ctx, dlq.FromMessage("billing", idem.Message{ID: id, Payload: []byte("x")}, errors.New("boom"))); err != nil {
			t.Fatal(err)
		}
	}
	// A message that came without an id: parked under dlq.SyntheticID.
	if _, err := letters.Park(ctx, dlq.FromMessage("ingest", idem.Message{Subject: "orders", Position: "9", Payload: []byte("y")},
		errors.New("no id"))); err != nil {
		t.Fatal(err)
	}
	ins := `INSERT INTO ` + d.Table("outbox") + ` (source, event_id, type, subject, time, payload, state, created_at, published_at)
 VALUES ($1, $2, 't', 's', 0, $3, $4, $5, $6)`
	testdb.Exec(t, d, ins, "src", "e1", []byte("{}"), "pending", store.Micros(now.Add(-90*time.Second)), int64(0))
	testdb.Exec(t, d, ins, "src", "e2", []byte("{}"), "pending", store.Micros(now.Add(-10*time.Second)), int64(0))
	testdb.Exec(t, d, ins, "src", "e3", []byte("{}"), "completed" /* published */, store.Micros(now.Add(-200*time.Second)), store.Micros(now))

	reg := prometheus.NewRegistry()
	reg.MustRegister(idemmetrics.NewDBCollector(d, idemmetrics.DBConfig{Now: func() time.Time { return now }}))
	srv := httptest.NewServer(promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
	defer srv.Close()
	resp, err := http.Get(srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	text := string(body)
	for _, line := range []string{
		`idem_dead_letters_parked{consumer="billing"} 2`,
		`idem_outbox_pending 2`,
	} {
		if !strings.Contains(text, line+"\n") {
			t.Errorf("scrape lacks %q:\n%s", line, text)
		}
	}
	if lag := value(t, reg, "idem_outbox_lag_seconds", ""); lag < 89 || lag > 91 {
		t.Errorf("outbox lag = %v, want ~90s", lag)
	}
	if !strings.Contains(text, `idem_table_rows{table="inbox"}`) {
		t.Errorf("no table row estimate:\n%s", text)
	}
	if d.Dialect() == store.SQLite { // no estimate: the rows are counted
		if n := value(t, reg, "idem_table_rows", "table=outbox"); n != 3 {
			t.Errorf("outbox rows = %v, want 3", n)
		}
	}

	st, err := idemmetrics.Snapshot(ctx, d, now)
	if err != nil {
		t.Fatal(err)
	}
	if st.DeadLetters.By["parked"] != 3 || st.DeadParked.By["billing"] != 2 || st.DeadParked.By["ingest"] != 1 || st.Outbox.Pending != 2 ||
		st.Outbox.Published != 1 || st.Outbox.LagSeconds < 89 {
		t.Fatalf("snapshot = %+v", st)
	}
	if st.DeadNoID.Total != 1 || st.DeadNoID.By["ingest"] != 1 || len(st.DeadNoID.By) != 1 {
		t.Fatalf("parked letters without a message id = %+v, want ingest: 1", st.DeadNoID)
	}
	if len(dlq.NoIDPrefix) != 6 || dlq.NoIDPrefix != "no-id:" {
		t.Fatalf("dlq.NoIDPrefix %q: update the query of Stats.DeadNoID", dlq.NoIDPrefix)
	}
}

// value is idemmetricstest.Value.
func value(t *testing.T, g prometheus.Gatherer, name, labels string) float64 {
	t.Helper()
	return idemmetricstest.Value(t, g, name, labels)
}
