package retention_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/broker/memory"
	"github.com/idemkit/idem/effect"
	"github.com/idemkit/idem/inbox"
	"github.com/idemkit/idem/internal/driverkit"
	"github.com/idemkit/idem/internal/testdb"
	"github.com/idemkit/idem/outbox"
	"github.com/idemkit/idem/retention"
	"github.com/idemkit/idem/store"
	"github.com/idemkit/idem/store/pgxstore"
)

// partitionedStores returns two drivers on one fresh, migrated PostgreSQL
// schema: one with the plain layout (for rows written before the
// conversion) and one with the partitioned layout.
func partitionedStores(t *testing.T) (plain, part store.Driver[any]) {
	t.Helper()
	pool, schema := testdb.PgxPool(t)
	pl, err := pgxstore.New(pool, pgxstore.Config{Names: store.Names{Schema: schema}})
	if err != nil {
		t.Fatal(err)
	}
	testdb.MustMigrate(t, pl)
	pa, err := pgxstore.New(pool, pgxstore.Config{Names: store.Names{Schema: schema, Layout: store.LayoutPartitioned}})
	if err != nil {
		t.Fatal(err)
	}
	return driverkit.Erase(pl), driverkit.Erase(pa)
}

// day is 2026-12-01 00:00 UTC, the test's calendar.
var day = time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)

func processAt[TTx any](t *testing.T, d store.Driver[TTx], at time.Time, retention time.Duration, consumer, id string, h inbox.Handler[TTx]) inbox.Result {
	t.Helper()
	in, err := inbox.New(d, inbox.Config{Retention: retention, Now: func() time.Time { return at }})
	if err != nil {
		t.Fatal(err)
	}
	res, err := in.Process(context.Background(), consumer, idem.Message{ID: id, Payload: []byte(id)}, h)
	if err != nil {
		t.Fatalf("process %s/%s: %v", consumer, id, err)
	}
	return res
}

func nop[TTx any](context.Context, TTx, idem.Message) error { return nil }

func inboxIDs[TTx any](t *testing.T, d store.Driver[TTx]) []string {
	t.Helper()
	return texts(t, d, `SELECT consumer || '/' || message_id FROM `+d.Table("inbox")+` ORDER BY 1`)
}

// texts runs query and returns its one text column.
func texts[TTx any](t *testing.T, d store.Driver[TTx], query string) []string {
	t.Helper()
	rows, err := d.Pool().Query(context.Background(), query)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	var out []string
	for rows.Next() {
		var s string
		if err := rows.Scan(&s); err != nil {
			t.Fatal(err)
		}
		out = append(out, s)
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

// The conversion keeps every row and its dedup; afterwards a GC pass drops
// exactly the partitions whose rows have all expired: rows older than
// their retention are gone, none younger is lost, and a consumer kept
// longer by InboxMinAge keeps its partition.
func TestPartitionedInboxExpiry(t *testing.T) {
	t.Parallel()
	plain, part := partitionedStores(t)
	ctx := context.Background()

	// Before the conversion: rows expiring on Dec 2 and Dec 6.
	processAt(t, plain, day, 36*time.Hour, "billing", "pre-dec02", nop[any])
	processAt(t, plain, day, 5*24*time.Hour+time.Hour, "billing", "pre-dec06", nop[any])

	if _, err := retention.Partition(ctx, plain, retention.PartitionConfig{}, day); !errors.Is(err, retention.ErrNotPartitionable) {
		t.Fatalf("Partition on a plain-layout store: %v, want ErrNotPartitionable", err)
	}
	rep, err := retention.Partition(ctx, part, retention.PartitionConfig{Ahead: 4 * 24 * time.Hour}, day)
	if err != nil {
		t.Fatal(err)
	}
	var want []string
	for _, table := range []string{"inbox", "idempotency_keys", "outbox", "effects"} {
		for d := 1; d <= 5; d++ {
			want = append(want, fmt.Sprintf("%s_p202612%02d", table, d))
		}
	}
	if !slices.Equal(rep.Created, want) {
		t.Fatalf("created %v, want %v", rep.Created, want)
	}
	if ok, err := retention.Partitioned(ctx, part); err != nil || !ok {
		t.Fatalf("Partitioned = %v, %v after the conversion", ok, err)
	}
	// Converting again only ensures partitions.
	if rep, err := retention.Partition(ctx, part, retention.PartitionConfig{Ahead: 4 * 24 * time.Hour}, day); err != nil || len(rep.Created) != 0 {
		t.Fatalf("second Partition: %+v, %v", rep, err)
	}
	// Dedup holds for the copied rows, on the partitioned statements.
	if res := processAt(t, part, day.Add(time.Hour), 7*24*time.Hour, "billing", "pre-dec02", nop[any]); res != inbox.Duplicate {
		t.Fatalf("redelivery of a copied record: %v, want Duplicate", res)
	}
	// After it: one row per expiry day, and a long-kept consumer.
	for i, exp := range []time.Duration{30 * time.Hour, 54 * time.Hour, 78 * time.Hour, 102 * time.Hour} {
		processAt(t, part, day, exp, "billing", fmt.Sprintf("post-%d", i), nop[any])
	}
	processAt(t, part, day, 30*time.Hour, "audit", "kept", nop[any]) // expires Dec 2 06:00
	// An expiry beyond the partitions lands in the default partition.
	processAt(t, part, day, 20*24*time.Hour, "billing", "far", nop[any])

	before := inboxIDs(t, part)
	// Dec 4 01:00: every partition up to Dec 3 has passed; Dec 4's holds a
	// row expiring at 06:00 (post-3 expires Dec 5 06:00, post-2 Dec 4 06:00).
	now := day.Add(3*24*time.Hour + time.Hour)
	gc, err := retention.New(part, retention.Config{
		Now:         func() time.Time { return now },
		InboxMinAge: map[string]time.Duration{"audit": 10 * 24 * time.Hour},
		Partitions:  retention.PartitionConfig{Ahead: 4 * 24 * time.Hour},
	})
	if err != nil {
		t.Fatal(err)
	}
	grep, err := gc.RunOnce(ctx)
	if err != nil {
		t.Fatal(err)
	}
	pr := grep.Partitions
	if pr == nil {
		t.Fatal("no partition report from a partitioned store's GC")
	}
	// Dec 1 held nothing and drops; Dec 2 holds audit/kept (InboxMinAge);
	// Dec 3 (post-1) drops; the ledger's partitions up to Dec 3 drop.
	if want := []string{"inbox_p20261201", "inbox_p20261203",
		"idempotency_keys_p20261201", "idempotency_keys_p20261202", "idempotency_keys_p20261203",
		"effects_p20261201", "effects_p20261202", "effects_p20261203"}; !slices.Equal(pr.Dropped, want) {
		t.Fatalf("dropped %v, want %v (report %+v)", pr.Dropped, want, pr)
	}
	if want := []string{"inbox_p20261202"}; !slices.Equal(pr.Kept, want) {
		t.Fatalf("kept %v, want %v", pr.Kept, want)
	}
	after := inboxIDs(t, part)
	// Gone: the rows of Dec 3 (post-1) and of Dec 2 that no minimum age
	// keeps (pre-dec02, post-0: deleted in batches from the kept partition).
	gone := []string{"billing/post-0", "billing/post-1", "billing/pre-dec02"}
	want = nil
	for _, id := range before {
		if !slices.Contains(gone, id) {
			want = append(want, id)
		}
	}
	if !slices.Equal(after, want) {
		t.Fatalf("after the GC: %v, want %v (before: %v)", after, want, before)
	}
	// None younger lost: every row expiring after now is still there.
	for _, id := range []string{"billing/post-2", "billing/post-3", "billing/pre-dec06", "billing/far", "audit/kept"} {
		if !slices.Contains(after, id) {
			t.Fatalf("%s (not expired) was lost", id)
		}
	}
	// The partitions ahead now reach Dec 8, and the far row still waits in
	// the default partition.
	if !slices.Contains(pr.Created, "inbox_p20261208") {
		t.Fatalf("created %v, want it to reach inbox_p20261208", pr.Created)
	}
}

// Racing deliveries of one message on the partitioned layout run the
// handler once, also when the deliveries compute different expiries (the
// case a partitioned unique key alone would not catch).
func TestPartitionedInboxRacingDuplicates(t *testing.T) {
	t.Parallel()
	_, part := partitionedStores(t)
	ctx := context.Background()
	if _, err := retention.Partition(ctx, part, retention.PartitionConfig{}, time.Now()); err != nil {
		t.Fatal(err)
	}
	const messages, racers = 40, 6
	var runs [messages]atomic.Int32
	var wg sync.WaitGroup
	errs := make(chan error, messages*racers)
	for r := range racers {
		in, err := inbox.New(part, inbox.Config{Retention: time.Duration(r+1) * 25 * time.Hour})
		if err != nil {
			t.Fatal(err)
		}
		for i := range messages {
			wg.Add(1)
			go func() {
				defer wg.Done()
				msg := idem.Message{ID: fmt.Sprintf("m-%d", i), Payload: []byte("same")}
				h := func(context.Context, any, idem.Message) error { runs[i].Add(1); return nil }
				var err error
				if r%2 == 0 {
					_, err = in.Process(ctx, "billing", msg, h)
				} else {
					_, err = in.ProcessBatch(ctx, "billing", []idem.Message{msg}, h)
				}
				if err != nil {
					errs <- err
				}
			}()
		}
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	for i := range messages {
		if n := runs[i].Load(); n != 1 {
			t.Errorf("message m-%d: handler ran %d times, want once", i, n)
		}
	}
	if n := testdb.Count(t, part, `SELECT count(*) FROM `+part.Table("inbox")); n != messages {
		t.Fatalf("%d inbox rows, want %d", n, messages)
	}
}

// The effect ledger's partitioned layout: a completed effect gets its
// expiry and moves into that day's partition; pending and kept (no
// retention) effects stay in the default partition, which is never
// dropped. A pass drops the expired days and keeps every effect not yet
// expired, and racing schedules of one key still insert it once.
func TestPartitionedEffects(t *testing.T) {
	t.Parallel()
	plain, part := partitionedStores(t)
	ctx := context.Background()
	call := func(context.Context, string) ([]byte, error) { return []byte("ok"), nil }
	doAt := func(d store.Driver[any], at time.Time, retention time.Duration, key string) {
		t.Helper()
		l, err := effect.New(d, effect.Config{Retention: retention, Now: func() time.Time { return at }})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := l.Do(ctx, key, call); err != nil {
			t.Fatalf("Do %s: %v", key, err)
		}
	}
	doAt(plain, day, 36*time.Hour, "pre-dec02") // before the conversion
	if _, err := retention.Partition(ctx, part, retention.PartitionConfig{Ahead: 4 * 24 * time.Hour}, day); err != nil {
		t.Fatal(err)
	}
	doAt(part, day, 30*time.Hour, "dec02")
	doAt(part, day, 78*time.Hour, "dec04")
	l, err := effect.New(part, effect.Config{Now: func() time.Time { return day }})
	if err != nil {
		t.Fatal(err)
	}
	// Racing schedules of one key: one row.
	var wg sync.WaitGroup
	var inserted atomic.Int32
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			tx, err := part.Begin(ctx)
			if err != nil {
				t.Error(err)
				return
			}
			defer func() { _ = part.Rollback(ctx, tx) }()
			_, ok, err := l.ScheduleTx(ctx, tx, effect.Effect{Key: "pending-1", Kind: "email", Payload: []byte("p")})
			if err == nil {
				err = part.Commit(ctx, tx)
			}
			if err != nil {
				t.Error(err)
				return
			}
			if ok {
				inserted.Add(1)
			}
		}()
	}
	wg.Wait()
	if n := inserted.Load(); n != 1 {
		t.Fatalf("8 racing schedules of one key inserted %d times, want once", n)
	}
	now := day.Add(3*24*time.Hour + time.Hour)
	gc, err := retention.New(part, retention.Config{Now: func() time.Time { return now }, Partitions: retention.PartitionConfig{Ahead: 4 * 24 * time.Hour}})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := gc.RunOnce(ctx); err != nil {
		t.Fatal(err)
	}
	keys := texts(t, part, `SELECT effect_key FROM `+part.Table("effects")+` ORDER BY 1`)
	if want := []string{"dec04", "pending-1"}; !slices.Equal(keys, want) {
		t.Fatalf("effects after the pass: %v, want %v (dec02 and pre-dec02 expired; dec04 not yet; pending-1 pending)", keys, want)
	}
}

// A drop that would wait for a long transaction on the table gives up
// after LockTimeout (the writers queued behind it would stall) and is
// done by the next pass.
func TestPartitionDropGivesUpOnLock(t *testing.T) {
	t.Parallel()
	_, part := partitionedStores(t)
	ctx := context.Background()
	cfg := retention.PartitionConfig{Ahead: 2 * 24 * time.Hour, LockTimeout: 100 * time.Millisecond}
	if _, err := retention.Partition(ctx, part, cfg, day); err != nil {
		t.Fatal(err)
	}
	// A transaction that read the inbox holds a lock on it until it ends.
	tx, err := part.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := part.Tx(tx).Exec(ctx, `SELECT count(*) FROM `+part.Table("inbox")); err != nil {
		t.Fatal(err)
	}
	later := day.Add(2*24*time.Hour + time.Hour)
	rep, err := retention.MaintainPartitions(ctx, part, cfg, later, nil)
	if err != nil {
		t.Fatal(err)
	}
	// Creating Dec 4's partition waits for the default partition's lock
	// and gives up; so does the drop of Dec 1 and 2.
	for _, want := range []string{"inbox_p20261204", "inbox_p20261201", "inbox_p20261202"} {
		if !slices.Contains(rep.Busy, want) {
			t.Fatalf("with the inbox locked: %+v, want %s busy", rep, want)
		}
	}
	if slices.Contains(rep.Dropped, "inbox_p20261201") || slices.Contains(rep.Created, "inbox_p20261204") {
		t.Fatalf("with the inbox locked: %+v, want nothing dropped or created", rep)
	}
	if err := part.Rollback(ctx, tx); err != nil {
		t.Fatal(err)
	}
	rep, err = retention.MaintainPartitions(ctx, part, cfg, later, nil)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Contains(rep.Dropped, "inbox_p20261201") || !slices.Contains(rep.Dropped, "inbox_p20261202") ||
		!slices.Contains(rep.Created, "inbox_p20261205") || len(rep.Busy) != 0 {
		t.Fatalf("after the transaction ended: %+v, want both dropped", rep)
	}
}

// The conversion continues the outbox's seq where its sequence was, not
// after the rows left: events deleted before it (pruned, or deleted on
// publication) keep their seqs used.
func TestPartitionedOutboxSeqAfterDeletedRows(t *testing.T) {
	t.Parallel()
	plain, part := partitionedStores(t)
	ctx := context.Background()
	enqueue := func(d store.Driver[any], id string) outbox.Event {
		t.Helper()
		o, err := outbox.New(d, outbox.Config{Source: "/test", Now: func() time.Time { return day }})
		if err != nil {
			t.Fatal(err)
		}
		var out []outbox.Event
		if err := store.InTx(ctx, d, func(tx any) error {
			out, err = o.EnqueueTx(ctx, tx, outbox.Event{ID: id, Type: "t", Topic: "orders", Payload: []byte(id)})
			return err
		}); err != nil {
			t.Fatal(err)
		}
		return out[0]
	}
	var last outbox.Event
	for _, id := range []string{"a", "b", "c"} {
		last = enqueue(plain, id)
	}
	testdb.Exec(t, plain, `DELETE FROM `+plain.Table("outbox")+` WHERE event_id IN ('b', 'c')`)
	if _, err := retention.Partition(ctx, part, retention.PartitionConfig{Ahead: 24 * time.Hour}, day); err != nil {
		t.Fatal(err)
	}
	if next := enqueue(part, "d"); next.Seq <= last.Seq {
		t.Fatalf("seq after the conversion %d, want past %d (the last one used, deleted before)", next.Seq, last.Seq)
	}
}

// The outbox's partitioned layout (by created_at): the conversion keeps
// every event, its dedup and its seq; events of one ordering key are
// published in order across partitions; racing enqueues of one event
// insert it once. A pass drops an outbox partition only when every event
// in it was published at least the retention ago: one holding an event
// still to publish, or published within the retention, is kept, and no
// event is lost.
func TestPartitionedOutbox(t *testing.T) {
	t.Parallel()
	plain, part := partitionedStores(t)
	ctx := context.Background()
	enqueueAt := func(d store.Driver[any], at time.Time, evs ...outbox.Event) []outbox.Event {
		t.Helper()
		o, err := outbox.New(d, outbox.Config{Source: "/test", Now: func() time.Time { return at }})
		if err != nil {
			t.Fatal(err)
		}
		var out []outbox.Event
		if err := store.InTx(ctx, d, func(tx any) error {
			out, err = o.EnqueueTx(ctx, tx, evs...)
			return err
		}); err != nil {
			t.Fatalf("enqueue at %s: %v", at, err)
		}
		return out
	}
	ev := func(id, key string) outbox.Event {
		return outbox.Event{ID: id, Type: "t", Topic: "orders", Key: key, Payload: []byte(id)}
	}
	pre := enqueueAt(plain, day, ev("dec01-a", "k"), ev("dec01-b", ""))
	if _, err := retention.Partition(ctx, part, retention.PartitionConfig{Ahead: 4 * 24 * time.Hour}, day); err != nil {
		t.Fatal(err)
	}
	// Every outbox partition, the default one included, has the room on its
	// pages that makes a keyless claim a heap-only update (migration 0013).
	if n := testdb.Count(t, part, `SELECT count(*) FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid
		WHERE i.inhparent = $1::regclass AND NOT coalesce('fillfactor=50' = ANY(c.reloptions), false)`, part.Table("outbox")); n != 0 {
		t.Fatalf("%d outbox partitions without fillfactor 50", n)
	}
	if n := testdb.Count(t, part, `SELECT count(*) FROM pg_inherits WHERE inhparent = $1::regclass`, part.Table("outbox")); n < 2 {
		t.Fatalf("%d outbox partitions, want the default one and those ahead", n)
	}
	// Dedup of a copied event, and the seq continues after the copied ones.
	if dup := enqueueAt(part, day.Add(time.Hour), ev("dec01-a", "k")); dup[0].Seq != 0 {
		t.Fatalf("re-enqueue of a copied event got seq %d, want a duplicate", dup[0].Seq)
	}
	dec02 := enqueueAt(part, day.Add(24*time.Hour), ev("dec02-a", "k"), ev("dec02-b", ""))
	if dec02[0].Seq <= pre[1].Seq {
		t.Fatalf("seq after the conversion %d, not after the copied %d", dec02[0].Seq, pre[1].Seq)
	}
	enqueueAt(part, day.Add(48*time.Hour), ev("dec03", "k"))
	// Racing enqueues of one event on the partitioned layout: one row.
	var wg sync.WaitGroup
	var inserted atomic.Int32
	for i := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			o, err := outbox.New(part, outbox.Config{Source: "/test", Now: func() time.Time { return day.Add(time.Duration(i) * time.Hour) }})
			if err != nil {
				t.Error(err)
				return
			}
			if err := store.InTx(ctx, part, func(tx any) error {
				out, err := o.EnqueueTx(ctx, tx, ev("raced", ""))
				if err == nil && out[0].Seq != 0 {
					inserted.Add(1)
				}
				return err
			}); err != nil {
				t.Error(err)
			}
		}()
	}
	wg.Wait()
	if n := inserted.Load(); n != 1 {
		t.Fatalf("8 racing enqueues of one event inserted it %d times, want once", n)
	}

	// Publish everything at Dec 3 00:30, in seq order per key.
	publishedAt := day.Add(48*time.Hour + 30*time.Minute)
	b, err := memory.New(memory.Config{})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	var mu sync.Mutex
	var order []string
	r, err := outbox.NewRelay(part, b.Publisher(), outbox.RelayConfig{Name: "r", PollInterval: 20 * time.Millisecond,
		Now: func() time.Time { return publishedAt },
		OnPublished: func(_ context.Context, evs []outbox.Event) {
			mu.Lock()
			defer mu.Unlock()
			for _, e := range evs {
				if e.Key == "k" {
					order = append(order, e.ID)
				}
			}
		}})
	if err != nil {
		t.Fatal(err)
	}
	runCtx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- r.Run(runCtx) }()
	deadline := time.Now().Add(30 * time.Second)
	for testdb.Count(t, part, `SELECT count(*) FROM `+part.Table("outbox")+` WHERE state <> 'completed'`) > 0 {
		if time.Now().After(deadline) {
			t.Fatal("the relay did not publish every event within 30s")
		}
		time.Sleep(20 * time.Millisecond)
	}
	stop()
	if err := <-done; err != nil && !errors.Is(err, context.Canceled) {
		t.Fatal(err)
	}
	mu.Lock()
	if want := []string{"dec01-a", "dec02-a", "dec03"}; !slices.Equal(order, want) {
		t.Fatalf("key k published in order %v, want %v", order, want)
	}
	mu.Unlock()
	// An event of Dec 2 still to publish (enqueued late, with a skewed clock).
	enqueueAt(part, day.Add(36*time.Hour), ev("dec02-pending", ""))

	ids := func() []string {
		t.Helper()
		return texts(t, part, `SELECT event_id FROM `+part.Table("outbox")+` ORDER BY 1`)
	}
	all := ids()
	pass := func(now time.Time) *retention.PartitionReport {
		t.Helper()
		gc, err := retention.New(part, retention.Config{Now: func() time.Time { return now }, OutboxRetention: 7 * 24 * time.Hour,
			Partitions: retention.PartitionConfig{Ahead: 4 * 24 * time.Hour}})
		if err != nil {
			t.Fatal(err)
		}
		rep, err := gc.RunOnce(ctx)
		if err != nil {
			t.Fatal(err)
		}
		return rep.Partitions
	}
	// Dec 10 00:15: Dec 1's and Dec 2's partitions have passed the
	// retention, but their events were published 7 days minus 15 minutes
	// ago: both kept, nothing deleted.
	pr := pass(publishedAt.Add(7*24*time.Hour - 15*time.Minute))
	for _, name := range []string{"outbox_p20261201", "outbox_p20261202"} {
		if !slices.Contains(pr.Kept, name) || slices.Contains(pr.Dropped, name) {
			t.Fatalf("within the retention: %+v, want %s kept", pr, name)
		}
	}
	if got := ids(); !slices.Equal(got, all) {
		t.Fatalf("within the retention: %v, want every event %v", got, all)
	}
	// Dec 10 01:00: Dec 1's drops; Dec 2's holds dec02-pending: kept.
	pr = pass(publishedAt.Add(7*24*time.Hour + 30*time.Minute))
	if !slices.Contains(pr.Dropped, "outbox_p20261201") || !slices.Contains(pr.Kept, "outbox_p20261202") || slices.Contains(pr.Dropped, "outbox_p20261202") {
		t.Fatalf("after the retention: %+v, want Dec 1 dropped and Dec 2 kept", pr)
	}
	want := slices.DeleteFunc(slices.Clone(all), func(id string) bool { return id == "dec01-a" || id == "dec01-b" || id == "raced" })
	if got := ids(); !slices.Equal(got, want) {
		t.Fatalf("after the retention: %v, want %v (Dec 1's events gone, no other lost)", got, want)
	}
}
