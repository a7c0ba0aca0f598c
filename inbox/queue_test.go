package inbox_test

import (
	"context"
	"fmt"
	"testing"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/inbox"
	"github.com/idemkit/idem/internal/testdb"
	"github.com/idemkit/idem/store"
)

// TestExecQueued: handlers writing through inbox.Exec in a batch. Their
// statements are queued during the fast pass and sent with its savepoint's
// release; when one fails at the database (here a CHECK constraint), the
// pass is rolled back and replayed message by message, so only the failing
// message is left out (error outcome, no inbox record) and every other
// message's row is committed exactly once, on every driver.
func TestExecQueued(t *testing.T) {
	t.Parallel()
	testdb.EachDriver(t, func(t *testing.T, d testdb.Driver) { testExecQueued(t, d.D) })
}

func testExecQueued[TTx any](t *testing.T, d store.Driver[TTx]) {
	testdb.Exec(t, d, `CREATE TABLE queued_biz (message_id varchar(100) PRIMARY KEY, amount integer NOT NULL CHECK (amount >= 0))`)
	ib, err := inbox.New(d, inbox.Config{})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	insert := `INSERT INTO queued_biz (message_id, amount) VALUES ($1, $2)`
	count := func(prefix string) int {
		return testdb.Count(t, d, `SELECT count(*) FROM queued_biz WHERE message_id LIKE $1`, prefix+"%")
	}
	records := func(consumer string) int {
		return testdb.Count(t, d, `SELECT count(*) FROM `+d.Table("inbox")+` WHERE consumer = $1`, consumer)
	}
	batch := func(prefix string, poison int) []idem.Message {
		var msgs []idem.Message
		for i := range 8 {
			amount := i
			if i == poison {
				amount = -1 // violates the CHECK when the queue is sent
			}
			msgs = append(msgs, idem.Message{ID: fmt.Sprintf("%s-%d", prefix, i), Payload: fmt.Appendf(nil, `{"amount":%d}`, amount)})
		}
		return msgs
	}
	// want checks out: every message processed but poison (-1: none),
	// which failed.
	want := func(t *testing.T, out []inbox.Outcome, poison int) {
		t.Helper()
		for i, o := range out {
			switch {
			case i == poison && o.Err == nil:
				t.Errorf("poison message: %+v, want its CHECK violation", o)
			case i != poison && (o.Err != nil || o.Result != inbox.Processed):
				t.Errorf("message %d: %+v, want processed", i, o)
			}
		}
	}
	amount := func(m idem.Message) int {
		var a int
		_, _ = fmt.Sscanf(string(m.Payload), `{"amount":%d}`, &a)
		return a
	}
	h := func(ctx context.Context, tx TTx, m idem.Message) error {
		return inbox.Exec(ctx, d, tx, insert, m.ID, amount(m))
	}

	t.Run("all succeed", func(t *testing.T) {
		out, err := ib.ProcessBatch(ctx, "q-ok", batch("ok", -1), h)
		if err != nil {
			t.Fatal(err)
		}
		want(t, out, -1)
		if n := count("ok-"); n != 8 {
			t.Errorf("%d business rows, want 8", n)
		}
		// Redelivered: duplicates, nothing run, nothing written twice.
		out, err = ib.ProcessBatch(ctx, "q-ok", batch("ok", -1), h)
		if err != nil {
			t.Fatal(err)
		}
		for i, o := range out {
			if o.Err != nil || o.Result != inbox.Duplicate {
				t.Errorf("redelivery of message %d: %+v, want duplicate", i, o)
			}
		}
		if n := count("ok-"); n != 8 {
			t.Errorf("%d business rows after the redelivery, want 8", n)
		}
	})

	t.Run("a queued statement fails", func(t *testing.T) {
		out, err := ib.ProcessBatch(ctx, "q-poison", batch("poison", 5), h)
		if err != nil {
			t.Fatal(err)
		}
		want(t, out, 5)
		if n := count("poison-"); n != 7 {
			t.Errorf("%d business rows, want 7 (each once, the poison message's none)", n)
		}
		if n := records("q-poison"); n != 7 {
			t.Errorf("%d inbox records, want 7 (the poison message's removed)", n)
		}
	})

	t.Run("Flush shows the queued writes", func(t *testing.T) {
		var before, seen []int
		rows := func(ctx context.Context, tx TTx) (int, error) {
			var n int
			err := d.Tx(tx).QueryRow(ctx, `SELECT count(*) FROM queued_biz WHERE message_id LIKE 'flush-%'`).Scan(&n)
			return n, err
		}
		out, err := ib.ProcessBatch(ctx, "q-flush", batch("flush", -1), func(ctx context.Context, tx TTx, m idem.Message) error {
			if err := h(ctx, tx, m); err != nil {
				return err
			}
			n, err := rows(ctx, tx)
			if err != nil {
				return err
			}
			before = append(before, n)
			if err := inbox.Flush(ctx, d, tx); err != nil {
				return err
			}
			if n, err = rows(ctx, tx); err != nil {
				return err
			}
			seen = append(seen, n)
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
		want(t, out, -1)
		for i, n := range before {
			if n != i {
				t.Fatalf("handlers saw %v rows before Flush, want 0, 1, 2…: Exec did not queue", before)
			}
		}
		for i, n := range seen {
			if n != i+1 {
				t.Fatalf("handlers saw %v rows after Flush, want 1, 2, 3…", seen)
			}
		}
		if len(seen) != 8 {
			t.Errorf("%d handler runs, want 8 (one pass, no replay)", len(seen))
		}
	})

	t.Run("a failing Flush fails the pass", func(t *testing.T) {
		out, err := ib.ProcessBatch(ctx, "q-flushfail", batch("flushfail", 2), func(ctx context.Context, tx TTx, m idem.Message) error {
			if err := h(ctx, tx, m); err != nil {
				return err
			}
			_ = inbox.Flush(ctx, d, tx) // the error ignored: the pass fails anyway
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
		want(t, out, 2)
		if n := count("flushfail-"); n != 7 {
			t.Errorf("%d business rows, want 7", n)
		}
	})

	t.Run("BatchHandler", func(t *testing.T) {
		// The BatchHandler's queued rows fail as a whole at the release;
		// the replay through h leaves out only the poison message.
		calls := 0
		var out []inbox.Outcome
		err := store.InTx(ctx, d, func(tx TTx) error {
			var err error
			out, err = ib.ProcessBatchWithTx(ctx, tx, "q-bh", batch("bh", 3), func(ctx context.Context, tx TTx, ms []idem.Message) error {
				calls++
				for _, m := range ms {
					if err := inbox.Exec(ctx, d, tx, insert, m.ID, amount(m)); err != nil {
						return err
					}
				}
				return nil
			}, h)
			return err
		})
		if err != nil {
			t.Fatal(err)
		}
		if calls != 1 {
			t.Errorf("%d BatchHandler calls, want 1", calls)
		}
		want(t, out, 3)
		if n := count("bh-"); n != 7 {
			t.Errorf("%d business rows, want 7", n)
		}
		if n := records("q-bh"); n != 7 {
			t.Errorf("%d inbox records, want 7", n)
		}
	})

	t.Run("outside a batch", func(t *testing.T) {
		// Process: no fast pass, Exec runs at once (the handler sees it).
		res, err := ib.Process(ctx, "q-single", idem.Message{ID: "single-1", Payload: []byte(`{"amount":1}`)}, func(ctx context.Context, tx TTx, m idem.Message) error {
			if err := h(ctx, tx, m); err != nil {
				return err
			}
			var n int
			if err := d.Tx(tx).QueryRow(ctx, `SELECT count(*) FROM queued_biz WHERE message_id = 'single-1'`).Scan(&n); err != nil {
				return err
			}
			if n != 1 {
				return fmt.Errorf("Exec outside a batch did not run at once: %d rows", n)
			}
			return nil
		})
		if err != nil || res != inbox.Processed {
			t.Fatalf("Process = %v, %v", res, err)
		}
		// A failing statement is the handler's error at once.
		if _, err := ib.Process(ctx, "q-single", idem.Message{ID: "single-2", Payload: []byte(`{"amount":-1}`)}, h); err == nil {
			t.Fatal("Process with a CHECK violation succeeded")
		}
		if n := records("q-single"); n != 1 {
			t.Errorf("%d inbox records, want 1", n)
		}
	})
}
