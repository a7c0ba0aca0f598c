package effect_test

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idemkit/idem/effect"
	"github.com/idemkit/idem/internal/testlog"
	"github.com/idemkit/idem/store"
)

// A backlog drains at the pace of the calls, not of the poll interval: with
// a poll interval far longer than the whole drain, 200 effects on 4 slots
// all complete before one poll interval has passed (a worker that refilled
// its slots once per poll, as it did when a stale wake-up reset its "more
// work" flag, needs at least 200/4 poll intervals), and the calls in flight
// never exceed Concurrency.
func TestWorkerRefillsFreedSlotsWithoutWaitingForThePoll(t *testing.T) {
	t.Parallel()
	forEachStore(t, func(t *testing.T, d store.Driver[any]) {
		const n, conc, poll = 200, 4, 30 * time.Second
		l := newLedger(t, d, effect.Config{})
		effs := make([]effect.Effect, n)
		for i := range effs {
			effs[i] = effect.Effect{Key: fmt.Sprintf("mail:%d", i), Kind: "email"}
		}
		schedule(t, d, l, effs...)
		var inFlight, peak, calls atomic.Int64
		w := fastWorker(t, l, effect.WorkerConfig[any]{Concurrency: conc, PollInterval: poll})
		_ = w.Register("email", func(context.Context, string, []byte) ([]byte, error) {
			cur := inFlight.Add(1)
			defer inFlight.Add(-1)
			for p := peak.Load(); cur > p && !peak.CompareAndSwap(p, cur); p = peak.Load() {
			}
			calls.Add(1)
			return []byte("sent"), nil
		})
		started := time.Now()
		stop := runWorker(t, w)
		for counts(t, l)[effect.Completed] < n {
			if time.Since(started) > poll {
				t.Fatalf("after one poll interval (%s) only %d of %d effects completed: the worker waits for the poll between bursts",
					poll, counts(t, l)[effect.Completed], n)
			}
			time.Sleep(10 * time.Millisecond)
		}
		stop()
		if c := counts(t, l); c[effect.Completed] != n || calls.Load() != n {
			t.Fatalf("counts %v, %d calls; want %d completed, one call each", c, calls.Load(), n)
		}
		if p := peak.Load(); p > conc {
			t.Fatalf("%d calls in flight at once; Concurrency is %d", p, conc)
		}
	})
}

// batchCounter counts the round trips that record completions: SendBatch
// calls and statements on the pool that set an effect completed.
type batchCounter struct {
	store.Driver[any]
	mu    sync.Mutex
	trips []string
}

func (b *batchCounter) note(what string) {
	b.mu.Lock()
	b.trips = append(b.trips, what)
	b.mu.Unlock()
}

func (b *batchCounter) SendBatch(ctx context.Context, q store.Querier, stmts []store.Stmt) error {
	b.note(fmt.Sprintf("batch of %d", len(stmts)))
	if c, ok := q.(completionCounter); ok {
		q = c.Querier // the driver's own, which it pipelines
	}
	return b.Driver.SendBatch(ctx, q, stmts)
}

func (b *batchCounter) Pool() store.Querier { return completionCounter{b.Driver.Pool(), b} }

type completionCounter struct {
	store.Querier
	b *batchCounter
}

func (c completionCounter) count(sql string, args []any) {
	if strings.Contains(sql, "state = 'completed'") && strings.HasPrefix(strings.TrimSpace(sql), "UPDATE") {
		c.b.note(fmt.Sprintf("statement with %d args", len(args)))
	}
}

func (c completionCounter) Exec(ctx context.Context, sql string, args ...any) (int64, error) {
	c.count(sql, args)
	return c.Querier.Exec(ctx, sql, args...)
}

func (c completionCounter) Query(ctx context.Context, sql string, args ...any) (store.Rows, error) {
	c.count(sql, args)
	return c.Querier.Query(ctx, sql, args...)
}

func (c completionCounter) QueryRow(ctx context.Context, sql string, args ...any) store.Row {
	c.count(sql, args)
	return c.Querier.QueryRow(ctx, sql, args...)
}

// Completions of calls that finish together are recorded in one batch, each
// fenced by its own token: the effect another claimer took over while its
// call ran (its token moved on) is not marked completed by the old owner's
// batch (one statement on PostgreSQL, one SendBatch elsewhere) and its lost lease is reported for it alone; the others of the same
// batch are completed with their results.
func TestBatchedCompletionsKeepFencing(t *testing.T) {
	t.Parallel()
	forEachStore(t, func(t *testing.T, d store.Driver[any]) {
		ctx := context.Background()
		const conc = 4
		bd := &batchCounter{Driver: d}
		l := newLedger(t, bd, effect.Config{Lease: time.Minute})
		keys := []string{"mail:a", "mail:b", "mail:victim", "mail:d"}
		var effs []effect.Effect
		for _, k := range keys {
			effs = append(effs, effect.Effect{Key: k, Kind: "email"})
		}
		schedule(t, d, l, effs...)
		var logs testlog.Buffer
		w := fastWorker(t, l, effect.WorkerConfig[any]{Concurrency: conc, PollInterval: time.Minute,
			CompleteDelay: 5 * time.Second, // the batch is recorded when full, not by the timer
			Logger:        slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug}))})
		var arrived sync.WaitGroup
		arrived.Add(conc)
		all := make(chan struct{})
		go func() { arrived.Wait(); close(all) }()
		_ = w.Register("email", func(_ context.Context, key string, _ []byte) ([]byte, error) {
			if key == "mail:victim" {
				// Another claimer takes the effect over while this call runs.
				if _, err := d.Pool().Exec(ctx, `UPDATE `+d.Table("effects")+` SET token = token + 1 WHERE effect_key = $1`, key); err != nil {
					t.Errorf("take-over: %v", err)
				}
			}
			arrived.Done()
			<-all // the four calls end together
			return []byte("sent " + key), nil
		})
		stop := runWorker(t, w)
		waitFor(t, "the three owned effects completed", func() bool { return counts(t, l)[effect.Completed] == 3 })
		waitFor(t, "the lost lease logged", func() bool { return strings.Contains(logs.String(), "lease lost before complete") })
		stop()

		bd.mu.Lock()
		trips := append([]string(nil), bd.trips...)
		bd.mu.Unlock()
		// PostgreSQL: the one set-based UPDATE of the four (Effects.CompleteBatch,
		// 5 arguments: the arrays, now, expires_at); elsewhere one batch of the
		// four fenced UPDATEs. No completion on its own either way.
		want := "batch of 4"
		if d.Dialect() == store.Postgres {
			want = "statement with 5 args"
		}
		if len(trips) != 1 || trips[0] != want {
			t.Fatalf("completion round trips %q; want the four completions in one (%s)", trips, want)
		}
		for _, k := range keys {
			e := get(t, l, k)
			if k == "mail:victim" {
				if e.State != effect.InProgress || e.Token != 2 || e.Result != nil && len(e.Result) > 0 {
					t.Fatalf("victim written by the old owner's batch: %+v", e)
				}
				continue
			}
			if e.State != effect.Completed || string(e.Result) != "sent "+k || e.Token != 1 {
				t.Fatalf("%s not completed by the batch: %+v", k, e)
			}
		}
		var lost []string
		for _, line := range strings.Split(logs.String(), "\n") {
			if strings.Contains(line, "lease lost before complete") {
				lost = append(lost, line)
			}
		}
		if len(lost) != 1 || !strings.Contains(lost[0], "effect_key=mail:victim") {
			t.Fatalf("lost-lease reports %q; want exactly one, for mail:victim", lost)
		}
	})
}

// claimCounter records the limit of every claim of kind on the pool.
type claimCounter struct {
	store.Driver[any]
	kind   string
	mu     sync.Mutex
	limits []int
}

func (c *claimCounter) Pool() store.Querier { return claimQuerier{c.Driver.Pool(), c} }

type claimQuerier struct {
	store.Querier
	c *claimCounter
}

func (q claimQuerier) Query(ctx context.Context, sql string, args ...any) (store.Rows, error) {
	// A claim's arguments: now, limit, lease_until, kind.
	if k, ok := lastString(args); ok && len(args) == 4 && k == q.c.kind {
		if n, ok := args[1].(int); ok {
			q.c.mu.Lock()
			q.c.limits = append(q.c.limits, n)
			q.c.mu.Unlock()
		}
	}
	return q.Querier.Query(ctx, sql, args...)
}

func lastString(args []any) (string, bool) {
	if len(args) == 0 {
		return "", false
	}
	s, ok := args[len(args)-1].(string)
	return s, ok
}

// While a backlog is due, the worker claims only once a quarter of its
// slots are free (CompleteDelay, here a minute, bounds that wait): a fast
// provider is fed by claims of many rows, never a claim per finished call,
// and the backlog still drains.
func TestClaimsWaitForAQuarterOfTheSlots(t *testing.T) {
	t.Parallel()
	forEachStore(t, func(t *testing.T, d store.Driver[any]) {
		const conc, n = 16, 300
		cd := &claimCounter{Driver: d, kind: "refill"}
		l := newLedger(t, cd, effect.Config{Lease: time.Minute})
		var effs []effect.Effect
		for i := range n {
			effs = append(effs, effect.Effect{Key: fmt.Sprintf("refill:%d", i), Kind: "refill"})
		}
		schedule(t, d, l, effs...)
		w := fastWorker(t, l, effect.WorkerConfig[any]{Concurrency: conc, PollInterval: time.Minute, CompleteDelay: time.Minute})
		_ = w.Register("refill", func(context.Context, string, []byte) ([]byte, error) { return []byte("ok"), nil })
		stop := runWorker(t, w)
		waitFor(t, "the backlog completed", func() bool { return counts(t, l)[effect.Completed] == n })
		stop()
		cd.mu.Lock()
		limits := append([]int(nil), cd.limits...)
		cd.mu.Unlock()
		for _, m := range limits {
			if m < conc/4 {
				t.Fatalf("claim limits %v: a claim asked for %d rows; want at least a quarter of %d slots", limits, m, conc)
			}
		}
		if len(limits) == 0 {
			t.Fatal("no claim seen")
		}
		t.Logf("%d effects drained in %d claims", n, len(limits))
	})
}
