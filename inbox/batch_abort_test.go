package inbox_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/inbox"
	"github.com/idemkit/idem/internal/testdb"
	"github.com/idemkit/idem/store"
)

// TestBatchAbortsOnSerializationFailure: a handler that hits a deadlock or
// a serialization failure (store.ErrSerialization) fails the batch's
// transaction as a whole, in the fast pass and in the per-message replay
// alike: ProcessBatch returns the error and commits nothing, instead of
// rolling back to the message's savepoint and carrying on with the locks
// the batch holds (which kept the other side of a PostgreSQL deadlock
// blocked, and made every later message of the batch wait out the
// deadlock timeout: the drill's stuck search projection).
func TestBatchAbortsOnSerializationFailure(t *testing.T) {
	t.Parallel()
	testdb.EachDriver(t, func(t *testing.T, d testdb.Driver) { testBatchAbort(t, d.D) })
}

func testBatchAbort[TTx any](t *testing.T, d store.Driver[TTx]) {
	testdb.Exec(t, d, `CREATE TABLE abort_biz (message_id text PRIMARY KEY)`)
	ib, err := inbox.New(d, inbox.Config{})
	if err != nil {
		t.Fatal(err)
	}
	deadlock := fmt.Errorf("search: %w", store.ErrSerialization)
	for _, c := range []struct {
		name string
		// fail returns the handler's error for message i on its run-th run
		// in the transaction.
		fail func(i, run int) error
	}{
		{"fast pass", func(i, _ int) error {
			if i == 3 {
				return deadlock
			}
			return nil
		}},
		{"per-message replay", func(i, run int) error {
			switch {
			case i == 1:
				return errors.New("poison") // sends the batch to the replay
			case i == 0 && run == 2: // message 0 in the replay
				return deadlock
			}
			return nil
		}},
	} {
		t.Run(c.name, func(t *testing.T) {
			ctx := context.Background()
			consumer := "abort-" + fmt.Sprint(len(c.name))
			var msgs []idem.Message
			for i := range 6 {
				msgs = append(msgs, idem.Message{ID: fmt.Sprintf("%s-%d", consumer, i), Payload: fmt.Appendf(nil, `{"i":%d}`, i)})
			}
			runs := map[string]int{}
			out, err := ib.ProcessBatch(ctx, consumer, msgs, func(ctx context.Context, tx TTx, m idem.Message) error {
				runs[m.ID]++
				if _, err := d.Tx(tx).Exec(ctx, testdb.Portable(d.Dialect(), `INSERT INTO abort_biz (message_id) VALUES ($1) ON CONFLICT DO NOTHING`), m.ID); err != nil {
					return err
				}
				var i int
				_, _ = fmt.Sscanf(m.ID[len(consumer)+1:], "%d", &i)
				return c.fail(i, runs[m.ID])
			})
			if !errors.Is(err, store.ErrSerialization) {
				t.Fatalf("ProcessBatch = %v, %v; want the batch to fail with store.ErrSerialization", out, err)
			}
			if n := testdb.Count(t, d, `SELECT count(*) FROM `+d.Table("inbox")+` WHERE consumer = $1`, consumer); n != 0 {
				t.Errorf("%d inbox rows committed, want 0", n)
			}
			if n := testdb.Count(t, d, `SELECT count(*) FROM abort_biz WHERE message_id LIKE $1`, consumer+"-%"); n != 0 {
				t.Errorf("%d business rows committed, want 0", n)
			}
			// The messages one by one (what the consumer runtime does next)
			// all commit once the conflict is gone.
			for _, m := range msgs {
				if _, err := ib.Process(ctx, consumer, m, func(ctx context.Context, tx TTx, m idem.Message) error {
					_, err := d.Tx(tx).Exec(ctx, `INSERT INTO abort_biz (message_id) VALUES ($1)`, m.ID)
					return err
				}); err != nil {
					t.Fatal(err)
				}
			}
			if n := testdb.Count(t, d, `SELECT count(*) FROM abort_biz WHERE message_id LIKE $1`, consumer+"-%"); n != len(msgs) {
				t.Errorf("%d business rows after the retry, want %d", n, len(msgs))
			}
		})
	}
}

// A deadlock met by the handler's own statement on the raw transaction
// (pgx.Tx, *sql.Tx: the database's error, which no idem Querier
// translated) fails the batch's transaction too, as the driver's
// store.ErrorTranslator classifies it. Before, only errors that already
// matched store.ErrSerialization did; a raw 40P01 was rolled back to the
// message's savepoint and the batch went on holding its locks. PostgreSQL
// only: the statement raises its deadlock_detected.
func TestBatchAbortsOnARawDeadlock(t *testing.T) {
	t.Parallel()
	for name, open := range map[string]func(t *testing.T) store.Driver[any]{
		"pgx":          func(t *testing.T) store.Driver[any] { return testdb.Erase(testdb.Pgx(t)) },
		"sql-postgres": func(t *testing.T) store.Driver[any] { return testdb.Erase(testdb.SQLPostgres(t)) },
	} {
		t.Run(name, func(t *testing.T) { testBatchAbortsOnARawDeadlock(t, open(t)) })
	}
}

func testBatchAbortsOnARawDeadlock(t *testing.T, d store.Driver[any]) {
	ib, err := inbox.New(d, inbox.Config{})
	if err != nil {
		t.Fatal(err)
	}
	const raise = `DO $$ BEGIN RAISE EXCEPTION 'deadlock detected' USING ERRCODE = '40P01'; END $$`
	ctx := context.Background()
	msgs := []idem.Message{{ID: "raw-0", Payload: []byte(`{}`)}, {ID: "raw-1", Payload: []byte(`{}`)}}
	out, err := ib.ProcessBatch(ctx, "raw", msgs, func(ctx context.Context, tx any, m idem.Message) error {
		if m.ID != "raw-1" {
			return nil
		}
		switch tx := tx.(type) {
		case pgx.Tx:
			_, err := tx.Exec(ctx, raise)
			return err
		case *sql.Tx:
			_, err := tx.ExecContext(ctx, raise)
			return err
		}
		return fmt.Errorf("unexpected transaction %T", tx)
	})
	if !errors.Is(err, store.ErrSerialization) {
		t.Fatalf("ProcessBatch = %v, %v; want the batch to fail with store.ErrSerialization", out, err)
	}
	if n := testdb.Count(t, d, `SELECT count(*) FROM `+d.Table("inbox")+` WHERE consumer = 'raw'`); n != 0 {
		t.Errorf("%d inbox rows committed, want 0", n)
	}
}
