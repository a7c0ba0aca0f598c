package console_test

import (
	"context"
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/idemkit/idem/cmd/idem/console"
	"github.com/idemkit/idem/dlq"
	"github.com/idemkit/idem/inbox"
	"github.com/idemkit/idem/internal/testdb"
)

// The console judges a redrive by the inbox retention the consumer
// recorded (not 7 days for everyone), and redrives past it only when
// forced with a reason (the redrive-reason field), which is stored with the
// letter and in the audit log, once.
func TestRedrivePastHorizonNeedsReason(t *testing.T) {
	testdb.EachDriver(t, func(t *testing.T, e testdb.Driver) {
		h := newHarness(t, e.D, console.Config{})
		ib, err := inbox.New(e.D, inbox.Config{Retention: 24 * time.Hour})
		if err != nil {
			t.Fatal(err)
		}
		if err := ib.RecordRetention(context.Background(), "billing"); err != nil {
			t.Fatal(err)
		}
		l := letter("billing", "orders", "m-old", `{"n":1}`)
		l.LastFailedAt = time.Now().Add(-48 * time.Hour) // inside 7 days, past billing's 24h
		id := h.park(l)
		page := h.get(fmt.Sprintf("/console/dlq/%d", id))
		for _, want := range []string{`data-testid="redrive-reason"`, `data-testid="redrive-force"`, `data-testid="letter-horizon"`, "24h00m", "this letter is older"} {
			if !strings.Contains(page, want) {
				t.Errorf("letter page lacks %s", want)
			}
		}
		path := fmt.Sprintf("/console/dlq/%d/redrive", id)
		if r := h.post(path, url.Values{"reason": {"looks fine"}}); r.status != http.StatusConflict || !strings.Contains(r.body, "redrive refused") {
			t.Fatalf("redrive past billing's 24h: %d %s, want 409 refused", r.status, r.body)
		}
		if r := h.post(path, url.Values{"force": {"1"}, "reason": {"  "}}); r.status != http.StatusBadRequest {
			t.Fatalf("forced redrive without a reason: %d, want 400", r.status)
		}
		if n := len(h.pub.published()); n != 0 {
			t.Fatalf("%d message(s) published by refused redrives", n)
		}
		if got := h.letter(id); got.State != dlq.Parked {
			t.Fatalf("letter is %s after refusals, want parked", got.State)
		}
		if r := h.post(path, url.Values{"force": {"1"}, "reason": {"checked the ledger: never applied"}}); r.status != http.StatusSeeOther {
			t.Fatalf("forced redrive with a reason: %d %s", r.status, r.body)
		}
		if got := h.letter(id); got.State != dlq.Redriven || got.RedriveReason != "checked the ledger: never applied" {
			t.Fatalf("forced letter: %+v", got)
		}
		if msgs := h.pub.published(); len(msgs) != 1 || msgs[0].ID != "m-old" {
			t.Fatalf("published %+v, want m-old once", msgs)
		}
		es := h.audit(console.AuditFilter{Action: "dlq.redrive"})
		if len(es) != 2 || es[0].Outcome != "ok" || es[0].Reason != "checked the ledger: never applied" || es[0].Actor != "alice" ||
			!strings.HasPrefix(es[1].Outcome, "failed: dlq: redrive refused") || es[1].Reason != "looks fine" {
			t.Fatalf("audit = %+v, want the refused and the forced redrive, once each", es)
		}
	})
}
