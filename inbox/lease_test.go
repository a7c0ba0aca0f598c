package inbox_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/inbox"
	"github.com/idemkit/idem/internal/lease"
	"github.com/idemkit/idem/store"
)

// Several recoverers claim one abandoned message at once: exactly one
// takes it over (a new token), every other one is refused with
// idem.ErrInProgress, and the record's token moved by exactly one. Done
// for several successive abandonments, on every driver.
func TestClaimTakesOverAnExpiredLeaseOnce(t *testing.T) {
	t.Parallel()
	forEachDriver(t, func(t *testing.T, e env) {
		ctx := context.Background()
		m := msg("abandoned-1", `{"job":"export"}`)
		l, err := e.claim(ctx, "exporter", m, time.Minute)
		if err != nil || l.Token != 1 {
			t.Fatalf("first claim: %+v %v", l, err)
		}
		const claimers = 8
		for round := 2; round <= 4; round++ {
			e.clock.Add(61 * time.Second) // the owner crashed; its lease ended
			var wg sync.WaitGroup
			start := make(chan struct{})
			leases := make(chan *inbox.Lease, claimers)
			errs := make(chan error, claimers)
			for range claimers {
				wg.Go(func() {
					<-start
					l, err := e.claim(ctx, "exporter", m, time.Minute)
					if err != nil {
						errs <- err
						return
					}
					leases <- l
				})
			}
			close(start)
			wg.Wait()
			close(leases)
			close(errs)
			var won []*inbox.Lease
			for l := range leases {
				won = append(won, l)
			}
			if len(won) != 1 {
				t.Fatalf("round %d: %d claimers took the lease over, want exactly 1: %+v", round, len(won), won)
			}
			if w := won[0]; !w.Recovered || w.Token != int64(round) || w.Attempt != round {
				t.Fatalf("round %d: winner %+v, want Recovered with token and attempt %d", round, w, round)
			}
			for err := range errs {
				if !errors.Is(err, idem.ErrInProgress) {
					t.Errorf("round %d: a losing claimer got %v, want ErrInProgress", round, err)
				}
			}
			if n := e.count(t, `SELECT count(*) FROM `+e.table+` WHERE message_id = $1 AND token = $2 AND state = $3`, m.ID, round, lease.InProgress); n != 1 {
				t.Fatalf("round %d: the record's token is not %d in_progress", round, round)
			}
			// The previous owner is fenced out.
			if err := e.extend(ctx, l, time.Minute); !errors.Is(err, idem.ErrLeaseLost) {
				t.Fatalf("round %d: the previous owner extended: %v, want ErrLeaseLost", round, err)
			}
			l = won[0]
		}
		if err := e.complete(ctx, l); err != nil {
			t.Fatalf("last owner completes: %v", err)
		}
		if n := e.count(t, `SELECT count(*) FROM effects_biz`); n != 1 {
			t.Fatalf("%d effects, want 1", n)
		}
	})
}

// Extend, Release and Fail are fenced by the token; a failed claim holds
// the message for reconciliation, for Claim and for Process alike, and a
// live claim makes Process answer ErrInProgress.
func TestLeaseFencedFinalisers(t *testing.T) {
	t.Parallel()
	forEachDriver(t, func(t *testing.T, e env) {
		ctx := context.Background()
		m := msg("fenced-1", `{"n":1}`)
		l, err := e.claim(ctx, "worker", m, time.Minute)
		if err != nil {
			t.Fatal(err)
		}
		if n := e.count(t, `SELECT count(*) FROM `+e.table+` WHERE message_id = $1 AND state = $2`, m.ID, lease.InProgress); n != 1 {
			t.Fatalf("a claim is not stored %q", lease.InProgress)
		}
		if _, err := e.process(ctx, "worker", m, nil); !errors.Is(err, idem.ErrInProgress) {
			t.Fatalf("Process of a claimed message: %v, want ErrInProgress", err)
		}
		// Extend keeps the lease alive past its first end.
		e.clock.Add(50 * time.Second)
		if err := e.extend(ctx, l, time.Minute); err != nil {
			t.Fatal(err)
		}
		e.clock.Add(30 * time.Second)
		if _, err := e.claim(ctx, "worker", m, time.Minute); !errors.Is(err, idem.ErrInProgress) {
			t.Fatalf("claim of an extended lease: %v, want ErrInProgress", err)
		}
		stale := *l
		stale.Token = 99
		for name, f := range map[string]func(*inbox.Lease) error{
			"extend":   func(l *inbox.Lease) error { return e.extend(ctx, l, time.Minute) },
			"release":  func(l *inbox.Lease) error { return e.release(ctx, l) },
			"fail":     func(l *inbox.Lease) error { return e.fail(ctx, l) },
			"complete": func(l *inbox.Lease) error { return e.complete(ctx, l) },
		} {
			if err := f(&stale); !errors.Is(err, idem.ErrLeaseLost) {
				t.Errorf("%s with a wrong token: %v, want ErrLeaseLost", name, err)
			}
		}
		// Release: the next claim starts from scratch.
		if err := e.release(ctx, l); err != nil {
			t.Fatal(err)
		}
		if l, err = e.claim(ctx, "worker", m, time.Minute); err != nil || l.Token != 1 || l.Recovered {
			t.Fatalf("claim after release: %+v %v, want a fresh claim", l, err)
		}
		// Fail: held for an operator.
		if err := e.fail(ctx, l); err != nil {
			t.Fatal(err)
		}
		if err := e.fail(ctx, l); !errors.Is(err, idem.ErrLeaseLost) {
			t.Fatalf("second fail: %v, want ErrLeaseLost", err)
		}
		if _, err := e.claim(ctx, "worker", m, time.Minute); !errors.Is(err, idem.ErrNeedsReconciliation) {
			t.Fatalf("claim of a failed record: %v, want ErrNeedsReconciliation", err)
		}
		if _, err := e.process(ctx, "worker", m, nil); !errors.Is(err, idem.ErrNeedsReconciliation) {
			t.Fatalf("Process of a failed record: %v, want ErrNeedsReconciliation", err)
		}
		if _, err := e.claim(ctx, "worker", msg("fenced-1", `{"n":2}`), time.Minute); !errors.Is(err, idem.ErrFingerprintMismatch) {
			t.Fatalf("claim with another payload: %v, want ErrFingerprintMismatch", err)
		}
		if n := e.count(t, `SELECT count(*) FROM effects_biz`); n != 0 {
			t.Fatalf("%d effects, want 0", n)
		}
	})
}

// Counts reports the records per state; Expire deletes, in bounded
// batches, exactly the records whose expires_at is before the horizon.
func TestExpireAndCounts(t *testing.T) {
	t.Parallel()
	forEachDriver(t, func(t *testing.T, e env) {
		ctx := context.Background()
		// 5 completed records received now (retention 7 days), then 2
		// claims and 1 failed claim received a day later.
		for i := range 5 {
			if _, err := e.process(ctx, "c", msg(fmt.Sprintf("done-%d", i), `{}`), nil); err != nil {
				t.Fatal(err)
			}
		}
		e.clock.Add(24 * time.Hour)
		for i := range 3 {
			l, err := e.claim(ctx, "c", msg(fmt.Sprintf("claim-%d", i), `{}`), time.Minute)
			if err != nil {
				t.Fatal(err)
			}
			if i == 2 {
				if err := e.fail(ctx, l); err != nil {
					t.Fatal(err)
				}
			}
		}
		got, err := e.counts(ctx)
		if err != nil {
			t.Fatal(err)
		}
		want := map[string]int64{lease.Completed: 5, lease.InProgress: 2, lease.Failed: 1}
		if fmt.Sprint(got) != fmt.Sprint(want) {
			t.Fatalf("Counts = %v, want %v", got, want)
		}
		// A horizon between the two expiries: only the 5 first records go,
		// 2 per call.
		horizon := e.clock.Now().Add(7*24*time.Hour - time.Hour)
		var total int64
		for _, want := range []int64{2, 2, 1, 0} {
			n, err := e.expire(ctx, horizon, 2)
			if err != nil || n != want {
				t.Fatalf("Expire = %d, %v; want %d", n, err, want)
			}
			total += n
		}
		if total != 5 {
			t.Fatalf("expired %d records, want 5", total)
		}
		if n := e.count(t, `SELECT count(*) FROM `+e.table); n != 3 {
			t.Fatalf("%d records left, want the 3 later ones", n)
		}
		if _, err := e.expire(ctx, horizon, 0); err == nil {
			t.Fatal("Expire with limit 0 succeeded")
		}
		// An expired record is forgotten: its redelivery is processed again.
		// effects_biz still holds done-0, so the business table's primary
		// key refuses the second effect: that proves the handler ran.
		if res, err := e.process(ctx, "c", msg("done-0", `{}`), nil); !errors.Is(err, store.ErrUniqueViolation) {
			t.Fatalf("redelivery after expiry: %v %v, want the handler to run (and hit the business key)", res, err)
		}
	})
}

// ExpireKeeping spares, per consumer, the records received since a given
// time, and expires the others like Expire.
func TestExpireKeeping(t *testing.T) {
	t.Parallel()
	forEachDriver(t, func(t *testing.T, e env) {
		ctx := context.Background()
		t0 := e.clock.Now()
		for _, c := range []string{"a", "b", "c"} {
			for i := range 3 {
				if _, err := e.process(ctx, c, msg(fmt.Sprintf("m-%d", i), `{}`), nil); err != nil {
					t.Fatal(err)
				}
				e.clock.Add(time.Hour)
			}
		}
		// Every record is past its expires_at. Consumer a keeps what it
		// received from its second record on, b everything, c nothing.
		horizon := e.clock.Now().Add(8 * 24 * time.Hour)
		keep := map[string]time.Time{"a": t0.Add(time.Hour), "b": t0}
		var total int64
		for {
			n, err := e.expireKeep(ctx, horizon, 2, keep)
			if err != nil {
				t.Fatal(err)
			}
			if total += n; n < 2 {
				break
			}
		}
		if total != 4 {
			t.Fatalf("expired %d records, want 4 (a's first and all of c's)", total)
		}
		for c, want := range map[string]int{"a": 2, "b": 3, "c": 0} {
			if n := e.count(t, `SELECT count(*) FROM `+e.table+` WHERE consumer = $1`, c); n != want {
				t.Errorf("consumer %s keeps %d records, want %d", c, n, want)
			}
		}
		if n, err := e.expireKeep(ctx, horizon, 10, nil); err != nil || n != 5 {
			t.Fatalf("ExpireKeeping without keep = %d, %v; want the 5 left", n, err)
		}
	})
}
