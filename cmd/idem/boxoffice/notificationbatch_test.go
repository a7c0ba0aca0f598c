package boxoffice_test

import (
	"context"
	"encoding/json"
	"fmt"
	"testing"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/cmd/idem/boxoffice"
	"github.com/idemkit/idem/inbox"
	"github.com/idemkit/idem/internal/operator"
	"github.com/idemkit/idem/internal/testdb"
	"github.com/idemkit/idem/outbox"
	"github.com/idemkit/idem/store"
)

// TestNotificationBatch applies OrderConfirmed events through the
// notification consumer's batch handler, as its consumer does
// (inbox.ProcessBatchWithTx with Notification as the per-message
// fallback), on every driver: each order gets one e-mail row and one
// e-mail effect with the per-message handler's key and payload; a poison
// event in the batch fails only itself; a redelivered batch changes
// nothing.
func TestNotificationBatch(t *testing.T) {
	testdb.EachDriver(t, func(t *testing.T, e testdb.Driver) {
		ctx := context.Background()
		d := e.D
		sys, err := boxoffice.New(ctx, d, boxoffice.Config{Roles: []boxoffice.Role{boxoffice.RoleAPI}, WebhookSecrets: []string{"whsec_dGVzdC1zZWNyZXQtZm9yLWJhdGNoLXRlc3Q="}})
		if err != nil {
			t.Fatal(err)
		}
		hs := boxoffice.HandlersOf(sys)
		ib, err := inbox.New(d, inbox.Config{})
		if err != nil {
			t.Fatal(err)
		}
		var ocs []boxoffice.OrderConfirmed
		var msgs []idem.Message
		for i := range 6 {
			oc := boxoffice.OrderConfirmed{Order: boxoffice.Order{
				OrderID: fmt.Sprintf("ord_01890000-0000-7000-8000-%012d", i), Tenant: "acme", EventID: "concert-1",
				CustomerEmail: fmt.Sprintf("c%d@example.com", i), Seats: 2, TotalCents: 9000, Currency: "EUR", Status: "confirmed",
			}, SeatsLeft: 10, EventVersion: int64(i + 1)}
			body, _ := json.Marshal(oc)
			if i == 3 {
				body = []byte(`{"order_id":"not an order"}`) // poison: dead-lettered by the consumer
			} else {
				ocs = append(ocs, oc)
			}
			msgs = append(msgs, outbox.Event{ID: fmt.Sprintf("ev-%d", i), Source: "test", Type: boxoffice.EventTypeOrderConfirmed, Payload: body}.Message())
		}
		process := func() []inbox.Outcome {
			t.Helper()
			var outs []inbox.Outcome
			if err := store.InTx(ctx, d, func(tx any) error {
				var err error
				outs, err = ib.ProcessBatchWithTx(ctx, tx, boxoffice.ConsumerNotification, msgs, hs.NotificationBatch, hs.Notification)
				return err
			}); err != nil {
				t.Fatal(err)
			}
			return outs
		}
		outs := process()
		for i, o := range outs {
			switch {
			case i == 3 && !idem.IsPermanent(o.Err):
				t.Errorf("poison event: outcome %+v, want a permanent error", o)
			case i != 3 && (o.Err != nil || o.Result != inbox.Processed):
				t.Errorf("event %d: outcome %+v, want processed", i, o)
			}
		}
		for _, oc := range ocs {
			key := boxoffice.ConfirmationEmailKey(oc.OrderID)
			got, err := sys.Ledger().Get(ctx, key)
			if err != nil {
				t.Fatalf("effect of %s: %v", oc.OrderID, err)
			}
			var p map[string]any
			if err := json.Unmarshal(got.Payload, &p); err != nil || got.Kind != boxoffice.EffectKindEmail || p["to"] != oc.CustomerEmail || p["order_id"] != oc.OrderID {
				t.Errorf("effect %s: kind %q payload %s (%v)", key, got.Kind, got.Payload, err)
			}
		}
		emails := func() int { return testdb.Count(t, d, `SELECT count(*) FROM `+tableOf(d, "outgoing_emails")) }
		effects := func() int { return testdb.Count(t, d, `SELECT count(*) FROM `+d.Table("effects")) }
		if emails() != len(ocs) || effects() != len(ocs) {
			t.Fatalf("%d e-mail rows and %d effects for %d orders", emails(), effects(), len(ocs))
		}
		// The same batch redelivered: duplicates (the poison event again
		// fails), no new row.
		for i, o := range process() {
			if i != 3 && (o.Err != nil || o.Result != inbox.Duplicate) {
				t.Errorf("redelivered event %d: outcome %+v, want duplicate", i, o)
			}
		}
		if emails() != len(ocs) || effects() != len(ocs) {
			t.Fatalf("after the redelivery: %d e-mail rows and %d effects for %d orders", emails(), effects(), len(ocs))
		}
		// A batch of valid events only takes the batch handler's path; an
		// order scheduled before (the effect exists with the same intent)
		// is not scheduled twice.
		var fresh []idem.Message
		fresh = append(fresh, outbox.Event{ID: "ev-0-again", Source: "test", Type: boxoffice.EventTypeOrderConfirmed, Payload: msgs[0].Payload}.Message())
		for i := range 2 {
			oc := ocs[0]
			oc.OrderID = fmt.Sprintf("ord_01890000-0000-7000-8000-%012d", 90+i)
			body, _ := json.Marshal(oc)
			fresh = append(fresh, outbox.Event{ID: fmt.Sprintf("ev-fresh-%d", i), Source: "test", Type: boxoffice.EventTypeOrderConfirmed, Payload: body}.Message())
		}
		msgs = fresh
		for i, o := range process() {
			if o.Err != nil || o.Result != inbox.Processed {
				t.Errorf("fresh event %d: outcome %+v, want processed", i, o)
			}
		}
		if emails() != len(ocs)+2 || effects() != len(ocs)+2 {
			t.Fatalf("after the fresh batch: %d e-mail rows and %d effects, want %d", emails(), effects(), len(ocs)+2)
		}
		if c, err := operator.EffectCountsByKind(ctx, d); err != nil || c[boxoffice.EffectKindEmail] != int64(len(ocs)+2) {
			t.Fatalf("effects by kind %v (%v)", c, err)
		}
	})
}

// tableOf is the qualified name of a boxoffice business table (in idem's
// schema on PostgreSQL, unprefixed on SQLite and MySQL).
func tableOf(d store.Driver[any], name string) string {
	if d.Dialect() == store.Postgres {
		return `"` + d.Names().Schema + `".` + name
	}
	return name
}
