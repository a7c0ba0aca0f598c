package lease_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/internal/lease"
	"github.com/idemkit/idem/internal/testdb"
	"github.com/idemkit/idem/store"
)

func TestDecide(t *testing.T) {
	t.Parallel()
	now := time.Date(2026, 3, 4, 5, 6, 7, 0, time.UTC)
	leases := []struct {
		name  string
		until time.Time
		live  bool
	}{
		{"live", now.Add(time.Second), true},
		{"ends now", now, false}, // a lease ending at now is over
		{"expired", now.Add(-time.Second), false},
		{"never leased", time.Time{}, false},
	}
	states := []string{lease.Pending, lease.InProgress, lease.Completed, lease.Failed}
	for _, state := range states {
		for _, l := range leases {
			for _, policy := range []idem.ExpiredLease{idem.Retake, idem.Hold} {
				for _, same := range []bool{true, false} {
					for _, expired := range []bool{false, true} {
						r := lease.Record{State: state, Token: 3, LeaseUntil: l.until, Same: same, Expired: expired}
						var want lease.Decision
						switch {
						case expired: // past retention: reclaimed as if absent, whatever else it says
							want = lease.Acquire
						case !same:
							want = lease.Mismatch
						case state == lease.Completed:
							want = lease.Done
						case state == lease.Failed:
							want = lease.Ended
						case state == lease.Pending:
							want = lease.Acquire
						case l.live:
							want = lease.Busy
						case policy == idem.Hold:
							want = lease.Held
						default:
							want = lease.Acquire
						}
						if got := lease.Decide(r, now, policy); got != want {
							t.Errorf("Decide(state %s, lease %s, %v, same %v, expired %v) = %v, want %v",
								state, l.name, policy, same, expired, got, want)
						}
					}
				}
			}
		}
	}
}

func TestDecisionString(t *testing.T) {
	t.Parallel()
	for d, want := range map[lease.Decision]string{
		lease.Acquire: "acquire", lease.Done: "done", lease.Busy: "busy", lease.Held: "held",
		lease.Ended: "ended", lease.Mismatch: "mismatch", 0: "Decision(0)", 99: "Decision(99)",
	} {
		if got := d.String(); got != want {
			t.Errorf("Decision(%d).String() = %q, want %q", int(d), got, want)
		}
	}
}

func TestFence(t *testing.T) {
	t.Parallel()
	if err := lease.Fence(1, nil, "complete order-1", 4); err != nil {
		t.Fatalf("one row fenced: %v", err)
	}
	err := lease.Fence(0, nil, "complete order-1", 4)
	if !errors.Is(err, idem.ErrLeaseLost) || !lease.Lost(err) {
		t.Fatalf("no row: %v, want ErrLeaseLost", err)
	}
	if msg := err.Error(); msg != "complete order-1 token 4: "+idem.ErrLeaseLost.Error() {
		t.Errorf("message %q", msg)
	}
	boom := errors.New("boom")
	err = lease.Fence(0, boom, "complete order-1", 4)
	if !errors.Is(err, boom) || lease.Lost(err) {
		t.Fatalf("statement error: %v, want boom and not lost", err)
	}
	if err.Error() != "complete order-1: boom" {
		t.Errorf("message %q", err)
	}
	if lease.Lost(nil) || lease.Lost(boom) {
		t.Error("Lost of a nil or unrelated error")
	}
}

// fakeOps records calls; each op answers from its func.
type fakeOps struct {
	inserts, reads, takeOvers int
}

func TestRunWithoutDatabase(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	boom := errors.New("boom")
	now := time.Unix(1000, 0)
	clock := func() time.Time { return now }
	live := lease.Record{State: lease.InProgress, Token: 2, LeaseUntil: now.Add(time.Minute), Same: true}
	expired := lease.Record{State: lease.InProgress, Token: 2, LeaseUntil: now.Add(-time.Minute), Same: true}

	t.Run("insert wins", func(t *testing.T) {
		c, err := lease.Run(ctx, lease.Ops[string]{
			Insert: func(context.Context, time.Time) (string, bool, error) { return "new", true, nil },
		}, idem.Retake, clock, 3)
		if err != nil || c.Decision != lease.Acquire || !c.Inserted || c.TookOver || c.Row != "new" {
			t.Fatalf("%+v %v", c, err)
		}
	})
	t.Run("errors of every op are returned", func(t *testing.T) {
		for i, ops := range []lease.Ops[int]{
			{Insert: func(context.Context, time.Time) (int, bool, error) { return 0, false, boom }},
			{
				Insert: func(context.Context, time.Time) (int, bool, error) { return 0, false, nil },
				Read: func(context.Context, time.Time) (int, lease.Record, bool, error) {
					return 0, lease.Record{}, false, boom
				},
			},
			{
				Insert:   func(context.Context, time.Time) (int, bool, error) { return 0, false, nil },
				Read:     func(context.Context, time.Time) (int, lease.Record, bool, error) { return 0, expired, true, nil },
				TakeOver: func(context.Context, lease.Record, time.Time) (int, bool, error) { return 0, false, boom },
			},
		} {
			if _, err := lease.Run(ctx, ops, idem.Retake, clock, 3); !errors.Is(err, boom) {
				t.Errorf("op %d: %v, want boom", i, err)
			}
		}
	})
	t.Run("a decision other than acquire is returned with the record", func(t *testing.T) {
		c, err := lease.Run(ctx, lease.Ops[int]{
			Insert: func(context.Context, time.Time) (int, bool, error) { return 0, false, nil },
			Read:   func(context.Context, time.Time) (int, lease.Record, bool, error) { return 7, live, true, nil },
			TakeOver: func(context.Context, lease.Record, time.Time) (int, bool, error) {
				t.Fatal("took over a live lease")
				return 0, false, nil
			},
		}, idem.Retake, clock, 3)
		if err != nil || c.Decision != lease.Busy || c.Row != 7 || c.Record != live {
			t.Fatalf("%+v %v", c, err)
		}
	})
	t.Run("take over passes the record read and now", func(t *testing.T) {
		c, err := lease.Run(ctx, lease.Ops[int]{
			Insert: func(context.Context, time.Time) (int, bool, error) { return 0, false, nil },
			Read:   func(context.Context, time.Time) (int, lease.Record, bool, error) { return 2, expired, true, nil },
			TakeOver: func(_ context.Context, r lease.Record, at time.Time) (int, bool, error) {
				if r != expired || !at.Equal(now) {
					t.Errorf("TakeOver(%+v, %v)", r, at)
				}
				return int(r.Token) + 1, true, nil
			},
		}, idem.Retake, clock, 3)
		if err != nil || c.Decision != lease.Acquire || !c.TookOver || c.Inserted || c.Row != 3 || c.Record != expired {
			t.Fatalf("%+v %v", c, err)
		}
	})
	t.Run("contention for every try", func(t *testing.T) {
		for _, tc := range []struct {
			tries, want int
		}{{3, 3}, {0, 5}, {-1, 5}} {
			var f fakeOps
			clocks := 0
			_, err := lease.Run(ctx, lease.Ops[int]{
				Insert: func(context.Context, time.Time) (int, bool, error) { f.inserts++; return 0, false, nil },
				Read: func(context.Context, time.Time) (int, lease.Record, bool, error) {
					f.reads++
					if f.reads%2 == 1 {
						return 0, lease.Record{}, false, nil // vanished (expired): insert again
					}
					return 0, expired, true, nil
				},
				TakeOver: func(context.Context, lease.Record, time.Time) (int, bool, error) { f.takeOvers++; return 0, false, nil },
			}, idem.Retake, func() time.Time { clocks++; return now }, tc.tries)
			if !errors.Is(err, lease.ErrContention) || !errors.Is(err, idem.ErrInProgress) {
				t.Fatalf("tries %d: %v, want ErrContention (an ErrInProgress)", tc.tries, err)
			}
			if f.inserts != tc.want || clocks != tc.want {
				t.Errorf("tries %d: %d inserts, now read %d times, want %d each", tc.tries, f.inserts, clocks, tc.want)
			}
		}
	})
}

// leaseTable is one small leased table in the test's own schema or file,
// with Ops over it: the shape every idem table's statements have.
type leaseTable struct {
	d store.Driver[any]
}

const leaseDDL = `CREATE TABLE conf_lease (
	k text PRIMARY KEY, state text NOT NULL, token bigint NOT NULL,
	lease_until bigint NOT NULL, fp text NOT NULL)`

func (lt leaseTable) ops(q store.Querier, key, fp string, ttl time.Duration) lease.Ops[int64] {
	return lease.Ops[int64]{
		Insert: func(ctx context.Context, now time.Time) (int64, bool, error) {
			n, err := q.Exec(ctx, testdb.Portable(lt.d.Dialect(), `INSERT INTO conf_lease (k, state, token, lease_until, fp) VALUES ($1, $2, 1, $3, $4) ON CONFLICT (k) DO NOTHING`),
				key, lease.InProgress, store.Micros(now.Add(ttl)), fp)
			return 1, n == 1, err
		},
		Read: func(ctx context.Context, now time.Time) (int64, lease.Record, bool, error) {
			var r lease.Record
			var until int64
			var storedFP string
			err := q.QueryRow(ctx, `SELECT state, token, lease_until, fp FROM conf_lease WHERE k = $1`, key).Scan(&r.State, &r.Token, &until, &storedFP)
			if errors.Is(err, store.ErrNoRows) {
				return 0, r, false, nil
			}
			r.LeaseUntil, r.Same = store.FromMicros(until), storedFP == fp
			return r.Token, r, err == nil, err
		},
		TakeOver: func(ctx context.Context, r lease.Record, now time.Time) (int64, bool, error) {
			n, err := q.Exec(ctx, `UPDATE conf_lease SET state = $1, token = token + 1, lease_until = $2 WHERE k = $3 AND token = $4`,
				lease.InProgress, store.Micros(now.Add(ttl)), key, r.Token)
			return r.Token + 1, n == 1, err
		},
	}
}

func (lt leaseTable) seed(t *testing.T, key, state string, token int64, until time.Time, fp string) {
	t.Helper()
	testdb.Exec(t, lt.d, `INSERT INTO conf_lease (k, state, token, lease_until, fp) VALUES ($1, $2, $3, $4, $5)`,
		key, state, token, store.Micros(until), fp)
}

func (lt leaseTable) token(t *testing.T, key string) int64 {
	t.Helper()
	return int64(testdb.Count(t, lt.d, `SELECT token FROM conf_lease WHERE k = $1`, key))
}

type outcome struct {
	c   lease.Claim[int64]
	err error
}

// race runs lease.Run from n goroutines released at once, each on the pool
// or in its own transaction.
func (lt leaseTable) race(t *testing.T, n int, inTx bool, key, fp string, policy idem.ExpiredLease) []outcome {
	t.Helper()
	ctx := context.Background()
	out := make([]outcome, n)
	start := make(chan struct{})
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			<-start
			if !inTx {
				out[i].c, out[i].err = lease.Run(ctx, lt.ops(lt.d.Pool(), key, fp, time.Minute), policy, time.Now, 5)
				return
			}
			out[i].err = store.InTx(ctx, lt.d, func(tx any) error {
				var err error
				out[i].c, err = lease.Run(ctx, lt.ops(lt.d.Tx(tx), key, fp, time.Minute), policy, time.Now, 5)
				return err
			})
		})
	}
	close(start)
	wg.Wait()
	return out
}

func tally(t *testing.T, out []outcome) map[string]int {
	t.Helper()
	m := map[string]int{}
	for i, o := range out {
		if o.err != nil {
			t.Fatalf("runner %d: %v", i, o.err)
		}
		k := o.c.Decision.String()
		switch {
		case o.c.Inserted:
			k = "inserted"
		case o.c.TookOver:
			k = "took over"
		}
		m[k]++
	}
	return m
}

// Concurrent claimers on a real table, on every driver: exactly one wins a
// fresh key or takes over an expired lease, the others see it busy; the
// old owner's fenced write then fails with ErrLeaseLost and the winner's
// succeeds.
func TestRunConcurrent(t *testing.T) {
	t.Parallel()
	testdb.EachDriver(t, func(t *testing.T, e testdb.Driver) {
		lt := leaseTable{e.D}
		testdb.Exec(t, e.D, leaseDDL)
		ctx := context.Background()
		const n = 10
		for _, inTx := range []bool{false, true} {
			p := fmt.Sprintf("tx=%v/", inTx)

			// A fresh key: one insert wins.
			got := tally(t, lt.race(t, n, inTx, p+"fresh", "fp", idem.Retake))
			if got["inserted"] != 1 || got["busy"] != n-1 {
				t.Fatalf("%sfresh key: %v, want 1 inserted and %d busy", p, got, n-1)
			}

			// An expired lease under Retake: exactly one takes over.
			lt.seed(t, p+"expired", lease.InProgress, 1, time.Now().Add(-time.Second), "fp")
			out := lt.race(t, n, inTx, p+"expired", "fp", idem.Retake)
			got = tally(t, out)
			if got["took over"] != 1 || got["busy"] != n-1 {
				t.Fatalf("%sexpired lease: %v, want exactly 1 took over and %d busy", p, got, n-1)
			}
			if tok := lt.token(t, p+"expired"); tok != 2 {
				t.Fatalf("%stoken after the take-over: %d, want 2", p, tok)
			}
			for _, o := range out {
				if o.c.TookOver && (o.c.Row != 2 || o.c.Record.Token != 1) {
					t.Fatalf("%swinner: row %d read token %d, want 2 and 1", p, o.c.Row, o.c.Record.Token)
				}
			}
			const finalise = `UPDATE conf_lease SET state = $1 WHERE k = $2 AND token = $3`
			nOld, err := e.D.Pool().Exec(ctx, finalise, lease.Completed, p+"expired", int64(1))
			if err := lease.Fence(nOld, err, "finalise", 1); !lease.Lost(err) {
				t.Fatalf("%sthe old owner's fenced write: %v, want ErrLeaseLost", p, err)
			}
			nNew, err := e.D.Pool().Exec(ctx, finalise, lease.Completed, p+"expired", int64(2))
			if err := lease.Fence(nNew, err, "finalise", 2); err != nil {
				t.Fatalf("%sthe winner's fenced write: %v", p, err)
			}

			// Completed now: everyone sees done, nothing changes.
			got = tally(t, lt.race(t, n, inTx, p+"expired", "fp", idem.Retake))
			if got["done"] != n {
				t.Fatalf("%scompleted: %v, want %d done", p, got, n)
			}

			// A pending row: exactly one claims it.
			lt.seed(t, p+"pending", lease.Pending, 4, time.Time{}, "fp")
			got = tally(t, lt.race(t, n, inTx, p+"pending", "fp", idem.Retake))
			if got["took over"] != 1 || got["busy"] != n-1 || lt.token(t, p+"pending") != 5 {
				t.Fatalf("%spending: %v (token %d), want 1 took over, %d busy, token 5", p, got, lt.token(t, p+"pending"), n-1)
			}

			// Hold: nobody takes the expired lease over.
			lt.seed(t, p+"held", lease.InProgress, 1, time.Now().Add(-time.Second), "fp")
			got = tally(t, lt.race(t, n, inTx, p+"held", "fp", idem.Hold))
			if got["held"] != n || lt.token(t, p+"held") != 1 {
				t.Fatalf("%shold: %v (token %d), want %d held and token 1", p, got, lt.token(t, p+"held"), n)
			}

			// Another payload under the same key: a mismatch, never a take-over.
			got = tally(t, lt.race(t, n, inTx, p+"held", "other", idem.Retake))
			if got["mismatch"] != n || lt.token(t, p+"held") != 1 {
				t.Fatalf("%smismatch: %v, want %d mismatch", p, got, n)
			}

			// Failed: ended.
			lt.seed(t, p+"failed", lease.Failed, 3, time.Time{}, "fp")
			if got := tally(t, lt.race(t, 3, inTx, p+"failed", "fp", idem.Retake)); got["ended"] != 3 {
				t.Fatalf("%sfailed: %v, want 3 ended", p, got)
			}
		}
	})
}
