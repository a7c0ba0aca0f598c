package retention_test

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"sync"
	"testing"
	"time"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/inbox"
	idemobs "github.com/idemkit/idem/internal/obs"
	"github.com/idemkit/idem/internal/testdb"
	"github.com/idemkit/idem/retention"
	"github.com/idemkit/idem/store"
)

func TestGC(t *testing.T) {
	t.Parallel()
	testdb.EachDriver(t, func(t *testing.T, e testdb.Driver) {
		if e.D.Names().Layout == store.LayoutPartitioned {
			// Its rows expire with their partitions, a span after their
			// expiry at the latest, not row by row at it: partition_test.go
			// holds that layout's expiry tests.
			t.Skip("the partitioned layout expires by partition (TestPartitioned*)")
		}
		testGC(t, e.D)
	})
}

// seedInbox inserts n inbox rows for consumer, ids prefix0..prefix(n-1),
// received at recv and expiring at exp.
func seedInbox[TTx any](t *testing.T, d store.Driver[TTx], consumer, prefix string, n int, recv, exp time.Time) {
	if d.Dialect() == store.MySQL { // no recursion past 1000 rows on MariaDB, CONCAT for ||
		const digit = `(SELECT 0 AS i UNION ALL SELECT 1 UNION ALL SELECT 2 UNION ALL SELECT 3 UNION ALL SELECT 4
 UNION ALL SELECT 5 UNION ALL SELECT 6 UNION ALL SELECT 7 UNION ALL SELECT 8 UNION ALL SELECT 9)`
		testdb.Exec(t, d, `INSERT INTO `+d.Table("inbox")+` (consumer, message_id, fingerprint, received_at, expires_at)
 SELECT $2, CONCAT($3, a.i + 10*b.i + 100*c.i + 1000*e.i), $4, $5, $6 FROM `+digit+` a, `+digit+` b, `+digit+` c, `+digit+` e
 WHERE a.i + 10*b.i + 100*c.i + 1000*e.i < $1`, n, consumer, prefix, []byte{1}, store.Micros(recv), store.Micros(exp))
		return
	}
	testdb.Exec(t, d, `WITH RECURSIVE s(i) AS (SELECT 0 UNION ALL SELECT i + 1 FROM s WHERE i + 1 < $1)
 INSERT INTO `+d.Table("inbox")+` (consumer, message_id, fingerprint, received_at, expires_at)
 SELECT $2, $3 || i, $4, $5, $6 FROM s`, n, consumer, prefix, []byte{1}, store.Micros(recv), store.Micros(exp))
}

// GC deletes only expired rows, in batches, while a consumer keeps
// processing new messages.
func testGC[TTx any](t *testing.T, d store.Driver[TTx]) {
	ctx := context.Background()
	now := time.Now()
	past, future := now.Add(-time.Hour), now.Add(time.Hour)
	seedInbox(t, d, "billing", "old-", 2500, now.Add(-8*24*time.Hour), past)
	seedInbox(t, d, "billing", "live-", 300, now, future)
	// A consumer whose retention was lengthened by the GC's InboxMinAge.
	seedInbox(t, d, "audit", "recent-", 50, now.Add(-2*time.Hour), past)
	seedInbox(t, d, "audit", "ancient-", 20, now.Add(-48*time.Hour), past)

	keys := `INSERT INTO ` + d.Table("idempotency_keys") + ` (tenant, operation, idem_key, fingerprint, created_at, expires_at) VALUES ($1, 'op', $2, $3, 0, $4)`
	testdb.Exec(t, d, keys, "t", "k-old", []byte{1}, store.Micros(past))
	testdb.Exec(t, d, keys, "t", "k-live", []byte{1}, store.Micros(future))
	ob := `INSERT INTO ` + d.Table("outbox") + ` (source, event_id, type, subject, time, payload, state, created_at, published_at)
 VALUES ('s', $1, 't', 's', 0, $2, $3, 0, $4)`
	// Published events are stored completed, parked ones failed (migration 0010).
	testdb.Exec(t, d, ob, "e-old", []byte("{}"), "completed", store.Micros(now.Add(-8*24*time.Hour)))
	testdb.Exec(t, d, ob, "e-recent", []byte("{}"), "completed", store.Micros(now.Add(-time.Hour)))
	testdb.Exec(t, d, ob, "e-pending", []byte("{}"), "pending", int64(0))
	testdb.Exec(t, d, ob, "e-parked", []byte("{}"), "failed", int64(0))
	ef := `INSERT INTO ` + d.Table("effects") + ` (effect_key, kind, payload, fingerprint, state, created_at, updated_at, expires_at)
 VALUES ($1, 'k', $2, $2, $3, 0, 0, $4)`
	testdb.Exec(t, d, ef, "f-done-old", []byte("x"), "completed", store.Micros(past))
	testdb.Exec(t, d, ef, "f-done-keep", []byte("x"), "completed", int64(0))
	testdb.Exec(t, d, ef, "f-failed-old", []byte("x"), "failed", store.Micros(past))
	dl := `INSERT INTO ` + d.Table("dead_letters") + ` (consumer, message_id, payload, fingerprint, first_failed_at, last_failed_at, state, resolved_at, created_at)
 VALUES ('c', $1, $2, $2, 0, 0, $3, $4, 0)`
	testdb.Exec(t, d, dl, "d-redriven-old", []byte("x"), "redriven", store.Micros(now.Add(-40*24*time.Hour)))
	testdb.Exec(t, d, dl, "d-discarded-old", []byte("x"), "discarded", store.Micros(now.Add(-40*24*time.Hour)))
	testdb.Exec(t, d, dl, "d-discarded-new", []byte("x"), "discarded", store.Micros(now.Add(-time.Hour)))
	testdb.Exec(t, d, dl, "d-parked", []byte("x"), "parked", int64(0))

	obs := &observer{deleted: map[string]int64{}}
	gc, err := retention.New(d, retention.Config{BatchSize: 1000, InboxMinAge: map[string]time.Duration{"audit": 24 * time.Hour},
		Observer: obs})
	if err != nil {
		t.Fatal(err)
	}
	ib, err := inbox.New(d, inbox.Config{})
	if err != nil {
		t.Fatal(err)
	}
	// The consumer keeps running while the GC deletes.
	stop := make(chan struct{})
	var wg sync.WaitGroup
	processed := 0
	wg.Go(func() {
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			default:
			}
			msg := idem.Message{ID: fmt.Sprintf("new-%d", i), Payload: []byte(`{}`)}
			if _, err := ib.Process(ctx, "billing", msg, func(context.Context, TTx, idem.Message) error { return nil }); err != nil {
				t.Error(err)
				return
			}
			processed++
		}
	})
	rep, err := gc.RunOnce(ctx)
	close(stop)
	wg.Wait()
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]int64{"inbox": 2520, "idempotency_keys": 1, "outbox": 1, "effects": 1, "dead_letters": 2}
	for table, n := range want {
		if rep.Deleted[table] != n {
			t.Errorf("deleted from %s = %d, want %d (report %+v)", table, rep.Deleted[table], n, rep)
		}
	}
	obs.mu.Lock()
	if !maps.Equal(obs.deleted, rep.Deleted) {
		t.Errorf("observer counted %v, report %v", obs.deleted, rep.Deleted)
	}
	obs.mu.Unlock()
	if rep.Batches < 3+4 { // inbox needs 3 batches of ≤1000; one for each other table
		t.Errorf("batches = %d, want ≥ 7", rep.Batches)
	}
	count := func(table, where string) int {
		return testdb.Count(t, d, `SELECT count(*) FROM `+d.Table(table)+` WHERE `+where)
	}
	if n := count("inbox", `consumer = 'billing' AND message_id LIKE 'live-%'`); n != 300 {
		t.Errorf("live inbox rows = %d, want 300", n)
	}
	if n := count("inbox", `message_id LIKE 'new-%'`); n != processed {
		t.Errorf("rows written during the GC = %d, want %d", n, processed)
	}
	if n := count("inbox", `consumer = 'audit'`); n != 50 {
		t.Errorf("audit rows = %d, want the 50 younger than InboxMinAge", n)
	}
	if n := count("outbox", `event_id IN ('e-recent', 'e-pending', 'e-parked')`); n != 3 {
		t.Errorf("outbox kept %d of 3", n)
	}
	if n := count("effects", `effect_key IN ('f-done-keep', 'f-failed-old')`); n != 2 {
		t.Errorf("effects kept %d of 2", n)
	}
	if n := count("dead_letters", `message_id IN ('d-discarded-new', 'd-parked')`); n != 2 {
		t.Errorf("dead letters kept %d of 2", n)
	}
	// A second pass finds nothing.
	rep, err = gc.RunOnce(ctx)
	if err != nil || rep.Total() != 0 {
		t.Fatalf("second pass: %+v, %v", rep, err)
	}
}

// observer is an idem.Observer summing the GC's deleted rows.
type observer struct {
	idemobs.NopObserver
	mu      sync.Mutex
	deleted map[string]int64
}

func (o *observer) GCDeleted(table string, n int64) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.deleted[table] += n
}

func TestMissingTablesSkipped(t *testing.T) {
	t.Parallel()
	d := testdb.SQLite(t)
	testdb.Exec(t, d, `DROP TABLE `+d.Table("effects"))
	gc, _ := retention.New(d, retention.Config{})
	rep, err := gc.RunOnce(context.Background())
	if err != nil || len(rep.Skipped) != 1 || rep.Skipped[0] != "effects" {
		t.Fatalf("report %+v, %v", rep, err)
	}
}

func TestRunStops(t *testing.T) {
	t.Parallel()
	d := testdb.SQLite(t)
	gc, _ := retention.New(d, retention.Config{Interval: 10 * time.Millisecond})
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	if err := gc.Run(ctx); err != nil {
		t.Fatal(err)
	}
}

func TestCheckRetention(t *testing.T) {
	t.Parallel()
	if err := retention.CheckRetention("billing", 24*time.Hour, 7*24*time.Hour); !errors.Is(err, retention.ErrRetentionTooShort) {
		t.Fatalf("1d retention for a 7d stream: %v", err)
	}
	if err := retention.CheckRetention("billing", 7*24*time.Hour, 24*time.Hour); err != nil {
		t.Fatal(err)
	}
	if err := retention.CheckRetention("billing", time.Hour, 0); err != nil {
		t.Fatal("unknown max age must not warn")
	}
	if err := retention.CheckRetention("billing", time.Hour, 2*time.Hour); !errors.Is(err, retention.ErrRetentionTooShort) {
		t.Fatalf("1h retention for a 2h stream: %v, want ErrRetentionTooShort", err)
	}
}

func TestSagaRetention(t *testing.T) {
	t.Parallel()
	testdb.EachDriver(t, func(t *testing.T, e testdb.Driver) { testSagaRetention(t, e.D) })
}

// Finished sagas older than SagaRetention go with their steps; younger
// finished ones and every running, compensating or held saga (however old)
// stay with all their steps.
func testSagaRetention[TTx any](t *testing.T, d store.Driver[TTx]) {
	ctx := context.Background()
	now := time.Now()
	old, young, ancient := now.Add(-40*24*time.Hour), now.Add(-time.Hour), now.Add(-400*24*time.Hour)
	sg := `INSERT INTO ` + d.Table("sagas") + ` (saga_id, name, fingerprint, input, state, step, steps, current_key, created_at, updated_at)
 VALUES ($1, 'order', $2, $2, $3, 0, 3, 'k', $4, $4)`
	st := `INSERT INTO ` + d.Table("saga_steps") + ` (saga_id, step, op, step_name, origin, outcome, created_at, updated_at)
 VALUES ($1, $2, $3, 's', $3, 'applied', 0, 0)`
	seed := func(id, state string, at time.Time, steps int) {
		testdb.Exec(t, d, sg, id, []byte("x"), state, store.Micros(at))
		for i := range steps {
			testdb.Exec(t, d, st, id, i, "do")
			testdb.Exec(t, d, st, id, i, "undo")
		}
	}
	seed("completed-old", "completed", old, 2)         // 4 steps, deleted
	seed("compensated-old", "compensated", old, 3)     // 6 steps, deleted
	seed("completed-nosteps", "completed", old, 0)     // deleted
	seed("completed-young", "completed", young, 2)     // kept
	seed("compensated-young", "compensated", young, 1) // kept
	seed("running-ancient", "running", ancient, 2)
	seed("compensating-ancient", "compensating", ancient, 2)
	seed("held-ancient", "held", ancient, 2)

	gc, err := retention.New(d, retention.Config{BatchSize: 3})
	if err != nil {
		t.Fatal(err)
	}
	rep, err := gc.RunOnce(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if rep.Deleted["saga_steps"] != 10 || rep.Deleted["sagas"] != 3 || len(rep.Skipped) != 0 {
		t.Fatalf("report %+v, want saga_steps=10 sagas=3", rep)
	}
	count := func(table, where string) int {
		return testdb.Count(t, d, `SELECT count(*) FROM `+d.Table(table)+` WHERE `+where)
	}
	if n := count("sagas", `saga_id IN ('completed-old', 'compensated-old', 'completed-nosteps')`); n != 0 {
		t.Errorf("%d expired finished sagas kept", n)
	}
	if n := count("saga_steps", `saga_id IN ('completed-old', 'compensated-old')`); n != 0 {
		t.Errorf("%d steps of expired sagas kept", n)
	}
	kept := map[string]int{"completed-young": 4, "compensated-young": 2, "running-ancient": 4, "compensating-ancient": 4, "held-ancient": 4}
	for id, steps := range kept {
		if n := count("sagas", `saga_id = '`+id+`'`); n != 1 {
			t.Errorf("saga %s deleted", id)
		}
		if n := count("saga_steps", `saga_id = '`+id+`'`); n != steps {
			t.Errorf("saga %s has %d steps, want %d", id, n, steps)
		}
	}
	if n := count("saga_steps", `saga_id NOT IN (SELECT saga_id FROM `+d.Table("sagas")+`)`); n != 0 {
		t.Errorf("%d orphan steps", n)
	}
	// A second pass finds nothing.
	if rep, err = gc.RunOnce(ctx); err != nil || rep.Total() != 0 {
		t.Fatalf("second pass: %+v, %v", rep, err)
	}
	// A shorter retention reaches the young finished sagas, never the live ones.
	gc, _ = retention.New(d, retention.Config{SagaRetention: time.Minute})
	if rep, err = gc.RunOnce(ctx); err != nil || rep.Deleted["sagas"] != 2 || rep.Deleted["saga_steps"] != 6 {
		t.Fatalf("pass with a 1m retention: %+v, %v", rep, err)
	}
	if n := count("sagas", `state IN ('running', 'compensating', 'held')`); n != 3 {
		t.Errorf("live sagas kept: %d of 3", n)
	}
	if n := count("saga_steps", `1 = 1`); n != 12 {
		t.Errorf("live saga steps kept: %d of 12", n)
	}
}

func TestSagaRetentionValidated(t *testing.T) {
	t.Parallel()
	d := testdb.SQLite(t)
	if _, err := retention.New(d, retention.Config{SagaRetention: -time.Hour}); !errors.Is(err, idem.ErrInvalidOption) {
		t.Fatalf("negative SagaRetention: %v", err)
	}
}

func TestMissingSagaTablesSkipped(t *testing.T) {
	t.Parallel()
	d := testdb.SQLite(t)
	testdb.Exec(t, d, `DROP TABLE `+d.Table("saga_steps"))
	testdb.Exec(t, d, `DROP TABLE `+d.Table("sagas"))
	gc, _ := retention.New(d, retention.Config{})
	rep, err := gc.RunOnce(context.Background())
	if err != nil || len(rep.Skipped) != 2 || rep.Skipped[0] != "saga_steps" || rep.Skipped[1] != "sagas" {
		t.Fatalf("report %+v, %v", rep, err)
	}
}
