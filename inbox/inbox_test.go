package inbox_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/inbox"
	"github.com/idemkit/idem/internal/operator"
	"github.com/idemkit/idem/internal/testdb"
	"github.com/idemkit/idem/store"
)

// forEachDriver runs test on every driver (testdb.EachDriver), each with
// fresh, migrated tables and a business table "effects_biz".
func forEachDriver(t *testing.T, test func(t *testing.T, e env)) {
	testdb.EachDriver(t, func(t *testing.T, d testdb.Driver) { test(t, newEnv(t, d.D)) })
}

// env hides the transaction type so one test body serves every driver.
type env struct {
	process      func(ctx context.Context, consumer string, msg idem.Message, fail error) (inbox.Result, error)
	processBatch func(ctx context.Context, consumer string, msgs []idem.Message, failID string) ([]inbox.Outcome, error)
	count        func(t *testing.T, sql string, args ...any) int
	table        string
	claim        func(ctx context.Context, consumer string, msg idem.Message, lease time.Duration) (*inbox.Lease, error)
	complete     func(ctx context.Context, l *inbox.Lease) error
	abandoned    func(ctx context.Context, consumer string) ([]inbox.Abandoned, error)
	extend       func(ctx context.Context, l *inbox.Lease, d time.Duration) error
	release      func(ctx context.Context, l *inbox.Lease) error
	fail         func(ctx context.Context, l *inbox.Lease) error
	expire       func(ctx context.Context, horizon time.Time, limit int) (int64, error)
	expireKeep   func(ctx context.Context, horizon time.Time, limit int, keep map[string]time.Time) (int64, error)
	counts       func(ctx context.Context) (map[string]int64, error)
	clock        *clock
}

type clock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *clock) Now() time.Time      { c.mu.Lock(); defer c.mu.Unlock(); return c.now }
func (c *clock) Add(d time.Duration) { c.mu.Lock(); c.now = c.now.Add(d); c.mu.Unlock() }

func newEnv[TTx any](t *testing.T, d store.Driver[TTx]) env {
	testdb.Exec(t, d, `CREATE TABLE effects_biz (consumer text NOT NULL, message_id text NOT NULL, payload text NOT NULL, PRIMARY KEY (consumer, message_id))`)
	clk := &clock{now: time.Now()}
	ib, err := inbox.New(d, inbox.Config{Now: clk.Now})
	if err != nil {
		t.Fatal(err)
	}
	handler := func(fail error) inbox.Handler[TTx] {
		return func(ctx context.Context, tx TTx, msg idem.Message) error {
			// A plain INSERT: a second run for one message would violate
			// the primary key, so the business table itself proves
			// once-only.
			if _, err := d.Tx(tx).Exec(ctx, `INSERT INTO effects_biz (consumer, message_id, payload) VALUES ($1, $2, $3)`,
				msg.Headers["consumer"], msg.ID, string(msg.Payload)); err != nil {
				return err
			}
			return fail
		}
	}
	tag := func(consumer string, m idem.Message) idem.Message {
		m.Headers = map[string]string{"consumer": consumer}
		return m
	}
	return env{
		process: func(ctx context.Context, consumer string, msg idem.Message, fail error) (inbox.Result, error) {
			return ib.Process(ctx, consumer, tag(consumer, msg), handler(fail))
		},
		processBatch: func(ctx context.Context, consumer string, msgs []idem.Message, failID string) ([]inbox.Outcome, error) {
			tagged := make([]idem.Message, len(msgs))
			for i, m := range msgs {
				tagged[i] = tag(consumer, m)
			}
			return ib.ProcessBatch(ctx, consumer, tagged, func(ctx context.Context, tx TTx, msg idem.Message) error {
				var fail error
				if msg.ID == failID {
					fail = errors.New("injected failure")
				}
				return handler(fail)(ctx, tx, msg)
			})
		},
		count: func(t *testing.T, sql string, args ...any) int { return testdb.Count(t, d, sql, args...) },
		table: d.Table("inbox"),
		claim: func(ctx context.Context, consumer string, msg idem.Message, lease time.Duration) (*inbox.Lease, error) {
			return ib.Claim(ctx, consumer, msg, lease)
		},
		complete: func(ctx context.Context, l *inbox.Lease) error {
			return store.InTx(ctx, d, func(tx TTx) error {
				if err := ib.CompleteTx(ctx, tx, l); err != nil {
					return err
				}
				_, err := d.Tx(tx).Exec(ctx, `INSERT INTO effects_biz (consumer, message_id, payload) VALUES ($1, $2, $3)`, l.Consumer, l.MessageID, fmt.Sprint(l.Token))
				return err
			})
		},
		abandoned: func(ctx context.Context, consumer string) ([]inbox.Abandoned, error) {
			return ib.Abandoned(ctx, consumer, 10)
		},
		extend:  ib.Extend,
		release: ib.Release,
		fail:    ib.Fail,
		expire: func(ctx context.Context, horizon time.Time, limit int) (int64, error) {
			return operator.InboxExpire(ctx, d, horizon, limit, nil)
		},
		expireKeep: func(ctx context.Context, horizon time.Time, limit int, keep map[string]time.Time) (int64, error) {
			return operator.InboxExpire(ctx, d, horizon, limit, keep)
		},
		counts: func(ctx context.Context) (map[string]int64, error) { return operator.InboxCounts(ctx, d) },
		clock:  clk,
	}
}

func msg(id, payload string) idem.Message { return idem.Message{ID: id, Payload: []byte(payload)} }

func TestConcurrentDuplicateDeliveries(t *testing.T) {
	t.Parallel()
	forEachDriver(t, func(t *testing.T, e env) {
		ctx := context.Background()
		var processed, duplicates atomic.Int32
		var wg sync.WaitGroup
		errs := make(chan error, 32)
		start := make(chan struct{})
		for range 32 {
			wg.Go(func() {
				<-start
				res, err := e.process(ctx, "billing", msg("order-1", `{"order":1}`), nil)
				if err != nil {
					errs <- err
					return
				}
				switch res {
				case inbox.Processed:
					processed.Add(1)
				case inbox.Duplicate:
					duplicates.Add(1)
				}
			})
		}
		close(start)
		wg.Wait()
		close(errs)
		for err := range errs {
			t.Errorf("a delivery leaked an error: %v", err)
		}
		if processed.Load() != 1 || duplicates.Load() != 31 {
			t.Fatalf("processed=%d duplicates=%d, want 1 and 31", processed.Load(), duplicates.Load())
		}
		if n := e.count(t, `SELECT count(*) FROM effects_biz`); n != 1 {
			t.Fatalf("%d business rows, want 1", n)
		}
		if n := e.count(t, `SELECT count(*) FROM `+e.table); n != 1 {
			t.Fatalf("%d inbox rows, want 1", n)
		}
	})
}

func TestInterleavedRedeliveries(t *testing.T) {
	t.Parallel()
	forEachDriver(t, func(t *testing.T, e env) {
		ctx := context.Background()
		var deliveries []idem.Message
		for i := range 200 {
			for range 3 {
				deliveries = append(deliveries, msg(fmt.Sprintf("m-%03d", i), fmt.Sprintf(`{"n":%d}`, i)))
			}
		}
		rand.Shuffle(len(deliveries), func(i, j int) { deliveries[i], deliveries[j] = deliveries[j], deliveries[i] })
		work := make(chan idem.Message)
		var processed, duplicates atomic.Int32
		var wg sync.WaitGroup
		for range 8 {
			wg.Go(func() {
				for m := range work {
					res, err := e.process(ctx, "billing", m, nil)
					if err != nil {
						t.Errorf("deliver %s: %v", m.ID, err)
						continue
					}
					if res == inbox.Processed {
						processed.Add(1)
					} else {
						duplicates.Add(1)
					}
				}
			})
		}
		for _, m := range deliveries {
			work <- m
		}
		close(work)
		wg.Wait()
		if processed.Load() != 200 || duplicates.Load() != 400 {
			t.Fatalf("processed=%d duplicates=%d, want 200 and 400", processed.Load(), duplicates.Load())
		}
		if n := e.count(t, `SELECT count(*) FROM effects_biz`); n != 200 {
			t.Fatalf("%d business rows, want 200", n)
		}
	})
}

// The transaction commits, the ack is never sent, the broker redelivers.
func TestCrashBetweenCommitAndAck(t *testing.T) {
	t.Parallel()
	forEachDriver(t, func(t *testing.T, e env) {
		ctx := context.Background()
		m := msg("evt-7", `{"a":1}`)
		if res, err := e.process(ctx, "billing", m, nil); err != nil || res != inbox.Processed {
			t.Fatalf("first delivery: %v %v", res, err)
		}
		// crash: no ack. Redelivery with attempt 2:
		m.Attempt = 2
		res, err := e.process(ctx, "billing", m, nil)
		if err != nil || res != inbox.Duplicate {
			t.Fatalf("redelivery: got %v %v, want duplicate", res, err)
		}
		if n := e.count(t, `SELECT count(*) FROM effects_biz`); n != 1 {
			t.Fatalf("%d business rows, want 1", n)
		}
	})
}

func TestHandlerErrorRollsBack(t *testing.T) {
	t.Parallel()
	forEachDriver(t, func(t *testing.T, e env) {
		ctx := context.Background()
		m := msg("evt-1", `{"a":1}`)
		boom := errors.New("downstream unavailable")
		if _, err := e.process(ctx, "billing", m, boom); !errors.Is(err, boom) {
			t.Fatalf("got %v, want the handler's error", err)
		}
		if n := e.count(t, `SELECT count(*) FROM `+e.table); n != 0 {
			t.Fatalf("%d inbox rows after a failed handler, want 0", n)
		}
		if n := e.count(t, `SELECT count(*) FROM effects_biz`); n != 0 {
			t.Fatalf("%d business rows after a failed handler, want 0", n)
		}
		if res, err := e.process(ctx, "billing", m, nil); err != nil || res != inbox.Processed {
			t.Fatalf("redelivery: %v %v, want processed", res, err)
		}
		if n := e.count(t, `SELECT count(*) FROM effects_biz`); n != 1 {
			t.Fatalf("%d business rows, want 1", n)
		}
	})
}

func TestFingerprintMismatch(t *testing.T) {
	t.Parallel()
	forEachDriver(t, func(t *testing.T, e env) {
		ctx := context.Background()
		if _, err := e.process(ctx, "billing", msg("evt-1", `{"amount": 10, "currency": "EUR"}`), nil); err != nil {
			t.Fatal(err)
		}
		// Same JSON, keys reordered and whitespace changed: a duplicate.
		res, err := e.process(ctx, "billing", msg("evt-1", `{"currency":"EUR","amount":10}`), nil)
		if err != nil || res != inbox.Duplicate {
			t.Fatalf("canonically equal payload: %v %v, want duplicate", res, err)
		}
		_, err = e.process(ctx, "billing", msg("evt-1", `{"amount": 99, "currency": "EUR"}`), nil)
		if !errors.Is(err, idem.ErrFingerprintMismatch) {
			t.Fatalf("changed payload: got %v, want ErrFingerprintMismatch", err)
		}
		var fm *idem.FingerprintMismatchError
		if !errors.As(err, &fm) || fm.Stored == fm.Received {
			t.Fatalf("want a FingerprintMismatchError with two different fingerprints, got %#v", err)
		}
		if !idem.IsPermanent(err) {
			t.Fatal("a fingerprint mismatch must be permanent")
		}
		if n := e.count(t, `SELECT count(*) FROM effects_biz WHERE payload LIKE '%99%'`); n != 0 {
			t.Fatal("the handler ran for the changed payload")
		}
	})
}

func TestConsumersAreIndependent(t *testing.T) {
	t.Parallel()
	forEachDriver(t, func(t *testing.T, e env) {
		ctx := context.Background()
		for _, c := range []string{"billing", "notification"} {
			if res, err := e.process(ctx, c, msg("evt-1", `{}`), nil); err != nil || res != inbox.Processed {
				t.Fatalf("%s: %v %v, want processed", c, res, err)
			}
		}
		for _, c := range []string{"billing", "notification"} {
			if res, err := e.process(ctx, c, msg("evt-1", `{}`), nil); err != nil || res != inbox.Duplicate {
				t.Fatalf("%s again: %v %v, want duplicate", c, res, err)
			}
		}
		if n := e.count(t, `SELECT count(*) FROM effects_biz`); n != 2 {
			t.Fatalf("%d business rows, want 2", n)
		}
	})
}

func TestBatchWithOneFailure(t *testing.T) {
	t.Parallel()
	forEachDriver(t, func(t *testing.T, e env) {
		ctx := context.Background()
		var msgs []idem.Message
		for i := range 100 {
			msgs = append(msgs, msg(fmt.Sprintf("b-%03d", i), fmt.Sprintf(`{"i":%d}`, i)))
		}
		out, err := e.processBatch(ctx, "billing", msgs, "b-037")
		if err != nil {
			t.Fatal(err)
		}
		for i, o := range out {
			switch {
			case i == 37 && o.Err == nil:
				t.Errorf("message 37: want its handler error")
			case i != 37 && (o.Err != nil || o.Result != inbox.Processed):
				t.Errorf("message %d: %v %v, want processed", i, o.Result, o.Err)
			}
		}
		if n := e.count(t, `SELECT count(*) FROM effects_biz`); n != 99 {
			t.Fatalf("%d business rows, want 99", n)
		}
		if n := e.count(t, `SELECT count(*) FROM `+e.table+` WHERE message_id = 'b-037'`); n != 0 {
			t.Fatal("message 37 is recorded in the inbox")
		}
		if n := e.count(t, `SELECT count(*) FROM `+e.table); n != 99 {
			t.Fatalf("%d inbox rows, want 99", n)
		}
		// Redeliver the whole batch (plus a repeat inside it): only 37 runs.
		again := append(msgs, msgs[5])
		out, err = e.processBatch(ctx, "billing", again, "")
		if err != nil {
			t.Fatal(err)
		}
		for i, o := range out {
			want := inbox.Duplicate
			if i == 37 {
				want = inbox.Processed
			}
			if o.Err != nil || o.Result != want {
				t.Errorf("redelivery %d: %v %v, want %v", i, o.Result, o.Err, want)
			}
		}
		if n := e.count(t, `SELECT count(*) FROM effects_biz`); n != 100 {
			t.Fatalf("%d business rows after redelivery, want 100", n)
		}
	})
}

func TestBatchMismatchAndInvalid(t *testing.T) {
	t.Parallel()
	forEachDriver(t, func(t *testing.T, e env) {
		ctx := context.Background()
		if _, err := e.process(ctx, "billing", msg("x", `{"v":1}`), nil); err != nil {
			t.Fatal(err)
		}
		out, err := e.processBatch(ctx, "billing", []idem.Message{
			msg("x", `{"v":2}`), // stored with another payload
			msg("", `{}`),       // invalid id
			msg("y", `{"v":1}`),
			msg("y", `{"v":3}`), // repeat in batch, other payload
		}, "")
		if err != nil {
			t.Fatal(err)
		}
		if !errors.Is(out[0].Err, idem.ErrFingerprintMismatch) {
			t.Errorf("stored mismatch: %v", out[0].Err)
		}
		if !errors.Is(out[1].Err, idem.ErrInvalidInput) {
			t.Errorf("empty id: %v", out[1].Err)
		}
		if out[2].Err != nil || out[2].Result != inbox.Processed {
			t.Errorf("y: %v %v", out[2].Result, out[2].Err)
		}
		if !errors.Is(out[3].Err, idem.ErrFingerprintMismatch) {
			t.Errorf("in-batch mismatch: %v", out[3].Err)
		}
		if n := e.count(t, `SELECT count(*) FROM effects_biz`); n != 2 {
			t.Fatalf("%d business rows, want 2", n)
		}
	})
}

// Overlapping batches from concurrent workers: every message once.
func TestConcurrentOverlappingBatches(t *testing.T) {
	t.Parallel()
	forEachDriver(t, func(t *testing.T, e env) {
		ctx := context.Background()
		var wg sync.WaitGroup
		for w := range 6 {
			wg.Go(func() {
				r := rand.New(rand.NewPCG(uint64(w), 1))
				for range 5 {
					var b []idem.Message
					for range 40 {
						i := r.IntN(150)
						b = append(b, msg(fmt.Sprintf("o-%03d", i), fmt.Sprintf(`{"i":%d}`, i)))
					}
					if _, err := e.processBatch(ctx, "billing", b, ""); err != nil {
						t.Errorf("batch: %v", err)
					}
				}
			})
		}
		wg.Wait()
		biz := e.count(t, `SELECT count(*) FROM effects_biz`)
		rows := e.count(t, `SELECT count(*) FROM `+e.table)
		if biz != rows || biz == 0 {
			t.Fatalf("%d business rows for %d inbox rows, want equal and non-zero", biz, rows)
		}
	})
}

func TestLeaseRecovery(t *testing.T) {
	t.Parallel()
	forEachDriver(t, func(t *testing.T, e env) {
		ctx := context.Background()
		m := msg("long-1", `{"job":"export"}`)
		first, err := e.claim(ctx, "exporter", m, time.Minute)
		if err != nil || first.Token != 1 {
			t.Fatalf("claim: %+v %v", first, err)
		}
		// The owner "crashes". Before the lease ends nobody may take over.
		e.clock.Add(59 * time.Second)
		if _, err := e.claim(ctx, "exporter", m, time.Minute); !errors.Is(err, idem.ErrInProgress) {
			t.Fatalf("claim during a live lease: %v, want ErrInProgress", err)
		}
		if ab, err := e.abandoned(ctx, "exporter"); err != nil || len(ab) != 0 {
			t.Fatalf("abandoned before expiry: %v %v, want none", ab, err)
		}
		e.clock.Add(2 * time.Second)
		ab, err := e.abandoned(ctx, "exporter")
		if err != nil || len(ab) != 1 || ab[0].MessageID != "long-1" {
			t.Fatalf("abandoned after expiry: %v %v", ab, err)
		}
		second, err := e.claim(ctx, "exporter", m, time.Minute)
		if err != nil || !second.Recovered || second.Token != 2 || second.Attempt != 2 {
			t.Fatalf("takeover: %+v %v", second, err)
		}
		// The zombie wakes up and tries to finish: rejected, nothing written.
		if err := e.complete(ctx, first); !errors.Is(err, idem.ErrLeaseLost) {
			t.Fatalf("zombie complete: %v, want ErrLeaseLost", err)
		}
		if err := e.complete(ctx, second); err != nil {
			t.Fatalf("owner complete: %v", err)
		}
		if _, err := e.claim(ctx, "exporter", m, time.Minute); !errors.Is(err, idem.ErrDuplicate) {
			t.Fatalf("claim after completion: %v, want ErrDuplicate", err)
		}
		if _, err := e.claim(ctx, "exporter", msg("long-1", `{"job":"other"}`), time.Minute); !errors.Is(err, idem.ErrFingerprintMismatch) {
			t.Fatalf("claim with another payload: %v, want ErrFingerprintMismatch", err)
		}
		if n := e.count(t, `SELECT count(*) FROM effects_biz`); n != 1 {
			t.Fatalf("%d effects, want 1", n)
		}
		if n := e.count(t, `SELECT count(*) FROM effects_biz WHERE payload = '2'`); n != 1 {
			t.Fatal("the effect was not written by the new owner")
		}
	})
}

func TestInvalidInput(t *testing.T) {
	t.Parallel()
	e := newEnv(t, testdb.SQLite(t))
	ctx := context.Background()
	long := make([]byte, 256)
	for i := range long {
		long[i] = 'a'
	}
	for _, c := range []struct{ consumer, id string }{{"", "x"}, {"c", ""}, {"c", string(long)}, {"c", "a\nb"}} {
		if _, err := e.process(ctx, c.consumer, msg(c.id, "{}"), nil); !errors.Is(err, idem.ErrInvalidInput) {
			t.Errorf("consumer %q id %q: %v, want ErrInvalidInput", c.consumer, c.id, err)
		}
	}
}

// A batch handler writes all new messages in one statement; when it fails
// (one poison message), the batch falls back to one savepoint per message.
func TestBatchHandler(t *testing.T) {
	t.Parallel()
	testdb.EachDriver(t, func(t *testing.T, d testdb.Driver) { testBatchHandler(t, d.D) })
}

func testBatchHandler[TTx any](t *testing.T, d store.Driver[TTx]) {
	ctx := context.Background()
	testdb.Exec(t, d, `CREATE TABLE bh_biz (id text PRIMARY KEY, payload text NOT NULL CHECK (payload <> 'poison'))`)
	ib, err := inbox.New(d, inbox.Config{})
	if err != nil {
		t.Fatal(err)
	}
	var batchCalls, singleCalls atomic.Int32
	bh := func(ctx context.Context, tx TTx, msgs []idem.Message) error {
		batchCalls.Add(1)
		sql := `INSERT INTO bh_biz (id, payload) VALUES `
		args := []any{}
		for i, m := range msgs {
			if i > 0 {
				sql += ","
			}
			sql += fmt.Sprintf("($%d, $%d)", 2*i+1, 2*i+2)
			args = append(args, m.ID, string(m.Payload))
		}
		_, err := d.Tx(tx).Exec(ctx, sql, args...)
		return err
	}
	h := func(ctx context.Context, tx TTx, m idem.Message) error {
		singleCalls.Add(1)
		_, err := d.Tx(tx).Exec(ctx, `INSERT INTO bh_biz (id, payload) VALUES ($1, $2)`, m.ID, string(m.Payload))
		return err
	}
	run := func(msgs []idem.Message) []inbox.Outcome {
		t.Helper()
		var out []inbox.Outcome
		if err := store.InTx(ctx, d, func(tx TTx) error {
			var err error
			out, err = ib.ProcessBatchWithTx(ctx, tx, "proj", msgs, bh, h)
			return err
		}); err != nil {
			t.Fatal(err)
		}
		return out
	}
	var msgs []idem.Message
	for i := range 50 {
		msgs = append(msgs, msg(fmt.Sprintf("a-%02d", i), "ok"))
	}
	for _, o := range run(msgs) {
		if o.Err != nil || o.Result != inbox.Processed {
			t.Fatalf("clean batch: %+v", o)
		}
	}
	if batchCalls.Load() != 1 || singleCalls.Load() != 0 {
		t.Fatalf("clean batch: %d batch calls, %d single calls; want 1 and 0", batchCalls.Load(), singleCalls.Load())
	}
	// A redelivered batch with 10 new messages, one of them poison.
	next := append([]idem.Message{}, msgs[:20]...)
	for i := range 10 {
		p := "ok"
		if i == 4 {
			p = "poison"
		}
		next = append(next, msg(fmt.Sprintf("b-%02d", i), p))
	}
	out := run(next)
	for i, o := range out {
		switch {
		case i < 20 && (o.Err != nil || o.Result != inbox.Duplicate):
			t.Errorf("redelivered %d: %+v, want duplicate", i, o)
		case i == 24 && o.Err == nil:
			t.Errorf("poison message processed")
		case i >= 20 && i != 24 && (o.Err != nil || o.Result != inbox.Processed):
			t.Errorf("new %d: %+v, want processed", i, o)
		}
	}
	if n := testdb.Count(t, d, `SELECT count(*) FROM bh_biz`); n != 59 {
		t.Fatalf("%d business rows, want 59", n)
	}
	if n := testdb.Count(t, d, `SELECT count(*) FROM `+d.Table("inbox")); n != 59 {
		t.Fatalf("%d inbox rows, want 59", n)
	}
}
