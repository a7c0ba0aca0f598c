package webhook_test

import (
	"context"
	"database/sql"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/idemkit/idem/inbox"
	"github.com/idemkit/idem/internal/obs/spantest"
	"github.com/idemkit/idem/internal/testdb"
	"github.com/idemkit/idem/webhook"
)

// One idem.webhook span per received delivery, with the source, the
// delivery id and the decision; a sender's traceparent makes it a child.
func TestWebhookSpans(t *testing.T) {
	d := testdb.SQLite(t)
	ib, err := inbox.New(d, inbox.Config{})
	if err != nil {
		t.Fatal(err)
	}
	rec := spantest.NewRecorder()
	std, _ := webhook.NewStandard(webhook.StandardConfig{Secrets: []string{stdSecret}})
	rc, err := webhook.NewReceiver(ib, webhook.ReceiverConfig[*sql.Tx]{
		Source: "billing", Verifier: std, TracerProvider: rec,
		EnqueueTx: func(context.Context, *sql.Tx, webhook.Delivery, []byte) error { return nil },
	})
	if err != nil {
		t.Fatal(err)
	}
	send := func(id, body string, signed bool) int {
		r := httptest.NewRequest(http.MethodPost, "/hook", strings.NewReader(body))
		if signed {
			if err := std.Sign(r.Header, webhook.Delivery{ID: id, Timestamp: time.Now()}, []byte(body)); err != nil {
				t.Fatal(err)
			}
		}
		r.Header.Set("traceparent", "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01")
		w := httptest.NewRecorder()
		rc.ServeHTTP(w, r)
		return w.Code
	}
	got := []int{send("d1", `{"a":1}`, true), send("d1", `{"a":1}`, true), send("d1", `{"a":2}`, true), send("d2", `{}`, false)}
	if want := []int{202, 200, 422, 401}; !slices.Equal(got, want) {
		t.Fatalf("statuses %v, want %v", got, want)
	}
	spans := rec.Ended()
	if len(spans) != 4 {
		t.Fatalf("%d spans, want 4", len(spans))
	}
	for i, want := range []struct{ decision, id string }{{"accepted", "d1"}, {"duplicate", "d1"}, {"mismatch", "d1"}, {"rejected", ""}} {
		s := spans[i]
		attrs := map[string]string{}
		for _, kv := range s.Attributes() {
			attrs[string(kv.Key)] = kv.Value.Emit()
		}
		if s.Name() != "idem.webhook" || attrs["idem.decision"] != want.decision || attrs["idem.delivery_id"] != want.id || attrs["idem.source"] != "billing" {
			t.Errorf("span %d: %s %v, want decision %s delivery %q", i, s.Name(), attrs, want.decision, want.id)
		}
		if s.Parent().SpanID().String() != "00f067aa0ba902b7" || s.SpanContext().TraceID().String() != "4bf92f3577b34da6a3ce929d0e0e4736" {
			t.Errorf("span %d is not a child of the sender's traceparent", i)
		}
	}
}
