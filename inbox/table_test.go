package inbox_test

import (
	"context"
	"maps"
	"testing"
	"time"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/inbox"
	"github.com/idemkit/idem/internal/lease"
	"github.com/idemkit/idem/internal/operator"
	"github.com/idemkit/idem/internal/testdb"
	"github.com/idemkit/idem/store"
)

// operator.InboxRecordOf (on the pool and in a transaction) and
// InboxCountsByConsumer read the stored records: the state each finaliser
// left, the expiry from the consumer's retention, and nothing for a record
// never received or expired.
func TestStateExpiryAndCountsByConsumer(t *testing.T) {
	t.Parallel()
	testdb.EachDriver(t, func(t *testing.T, e testdb.Driver) {
		ctx := context.Background()
		d := e.D
		t0 := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
		clk := &clock{now: t0}
		in, err := inbox.New(d, inbox.Config{Now: clk.Now, Retention: 7 * 24 * time.Hour,
			RetentionFor: map[string]time.Duration{"short": time.Hour}})
		if err != nil {
			t.Fatal(err)
		}
		ok := func(context.Context, any, idem.Message) error { return nil }
		if _, err := in.Process(ctx, "orders", msg("m1", `{}`), ok); err != nil {
			t.Fatal(err)
		}
		if _, err := in.Claim(ctx, "orders", msg("m2", `{}`), time.Minute); err != nil {
			t.Fatal(err)
		}
		l, err := in.Claim(ctx, "short", msg("m3", `{}`), time.Minute)
		if err != nil {
			t.Fatal(err)
		}
		if err := in.Fail(ctx, l); err != nil {
			t.Fatal(err)
		}

		week, hour := t0.Add(7*24*time.Hour), t0.Add(time.Hour)
		for _, c := range []struct {
			consumer, id, state string
			expires             time.Time
		}{
			{"orders", "m1", lease.Completed, week},
			{"orders", "m2", lease.InProgress, week},
			{"short", "m3", lease.Failed, hour},
		} {
			if r, found, err := operator.InboxRecordOf(ctx, d, c.consumer, c.id); err != nil || !found || r.State != c.state || !r.ExpiresAt.Equal(c.expires) {
				t.Fatalf("InboxRecordOf(%s, %s) = %+v, %v, %v; want %q, %v", c.consumer, c.id, r, found, err, c.state, c.expires)
			}
			err := store.InTx(ctx, d, func(tx any) error {
				r, found, err := operator.InboxRecordOf(ctx, operator.InTx(d, d.Tx(tx)), c.consumer, c.id)
				if err == nil && (!found || !r.ExpiresAt.Equal(c.expires)) {
					t.Errorf("InboxRecordOf(%s, %s) in a transaction = %+v, %v; want %v", c.consumer, c.id, r, found, c.expires)
				}
				return err
			})
			if err != nil {
				t.Fatal(err)
			}
		}
		// Another consumer's id, an unknown id: no record.
		for _, k := range [][2]string{{"short", "m1"}, {"orders", "m3"}, {"orders", "nope"}} {
			if r, found, err := operator.InboxRecordOf(ctx, d, k[0], k[1]); err != nil || found || r != (operator.InboxRecord{}) {
				t.Fatalf("InboxRecordOf%v = %+v, %v, %v; want not found", k, r, found, err)
			}
		}
		want := map[string]int64{"orders": 2, "short": 1}
		if got, err := operator.InboxCountsByConsumer(ctx, d); err != nil || !maps.Equal(got, want) {
			t.Fatalf("CountsByConsumer = %v, %v; want %v", got, err, want)
		}

		// The short consumer's record expires; the others stay.
		if n, err := operator.InboxExpire(ctx, d, t0.Add(2*time.Hour), 10, nil); err != nil || n != 1 {
			t.Fatalf("Expire = %d, %v; want 1", n, err)
		}
		if _, found, err := operator.InboxRecordOf(ctx, d, "short", "m3"); err != nil || found {
			t.Fatalf("InboxRecordOf expired record: found %v, %v", found, err)
		}
		want = map[string]int64{"orders": 2}
		if got, err := operator.InboxCountsByConsumer(ctx, d); err != nil || !maps.Equal(got, want) {
			t.Fatalf("CountsByConsumer after Expire = %v, %v; want %v", got, err, want)
		}
	})
}
