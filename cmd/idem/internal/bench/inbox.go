package bench

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/inbox"
	"github.com/idemkit/idem/store"
	"github.com/idemkit/idem/store/idemmysql"
)

// businessTable creates a fresh business table (id text primary key,
// payload, created_at) and returns its name and its INSERT statement.
func businessTable[TTx any](ctx context.Context, d store.Driver[TTx], name string) (insert string, err error) {
	// The bench's own business table, not idem's: its column type is the
	// bench's SQL, per dialect (no driver ability says how to spell a
	// byte column).
	id, blob := "text", "bytea"
	switch d.Dialect() {
	case store.SQLite:
		blob = "blob"
	case idemmysql.Dialect:
		// InnoDB: a key column needs a bounded type; bytes compare as
		// PostgreSQL compares text.
		id, blob = "VARBINARY(255)", "LONGBLOB"
	}
	if _, err := d.Pool().Exec(ctx, `CREATE TABLE `+name+` (id `+id+` PRIMARY KEY, payload `+blob+` NOT NULL, created_at bigint NOT NULL)`); err != nil {
		return "", fmt.Errorf("create %s: %w", name, err)
	}
	return `INSERT INTO ` + name + ` (id, payload, created_at) VALUES ($1, $2, $3)`, nil
}

// countRows returns the number of rows in table.
func countRows[TTx any](ctx context.Context, d store.Driver[TTx], table string) (int, error) {
	var n int
	err := d.Pool().QueryRow(ctx, `SELECT count(*) FROM `+table).Scan(&n)
	return n, err
}

// inboxVsPlain: one message per transaction through the inbox (Process:
// inbox row + one business INSERT) against the business INSERT alone, on
// workers concurrent workers.
func inboxVsPlain[TTx any](e *Env, d store.Driver[TTx], storeName string, workers int) Pair {
	var (
		in       *inbox.Inbox[TTx]
		insert   string
		seq      atomic.Int64
		consumer = e.name("bench")
	)
	p := Pair{Name: fmt.Sprintf("inbox_vs_plain_%dw_%s", workers, storeName)}
	p.Setup = func(ctx context.Context) (err error) {
		if in, err = inbox.New(d, inbox.Config{}); err != nil {
			return err
		}
		insert, err = businessTable(ctx, d, e.name("rows_inbox_plain"))
		return err
	}
	p.A = Side{Label: "inbox", Run: func(ctx context.Context, budget time.Duration) (Sample, error) {
		h := func(ctx context.Context, tx TTx, msg idem.Message) error {
			_, err := d.Tx(tx).Exec(ctx, insert, msg.ID, msg.Payload, store.Micros(time.Now()))
			return err
		}
		return throughput(ctx, budget, workers, func(ctx context.Context, _ int) (int, error) {
			msg := idem.Message{ID: "m-" + strconv.FormatInt(seq.Add(1), 10), Subject: "bench", Payload: payload, Attempt: 1}
			// Process: the inbox's own transaction per message (with pgx,
			// BEGIN and the inbox INSERT share one round trip).
			res, err := in.Process(ctx, consumer, msg, h)
			if err == nil && res != inbox.Processed {
				err = fmt.Errorf("message %s: %v, want processed", msg.ID, res)
			}
			return 1, err
		})
	}}
	p.B = Side{Label: "plain", Run: func(ctx context.Context, budget time.Duration) (Sample, error) {
		return throughput(ctx, budget, workers, func(ctx context.Context, _ int) (int, error) {
			id := "p-" + strconv.FormatInt(seq.Add(1), 10)
			return 1, store.InTx(ctx, d, func(tx TTx) error {
				_, err := d.Tx(tx).Exec(ctx, insert, id, payload, store.Micros(time.Now()))
				return err
			})
		})
	}}
	return p
}

// batchSize is the batch of inbox_batch_vs_single and of the batch consumers.
const batchSize = 100

// inboxBatchVsSingle: batches of 100 messages per transaction
// (ProcessBatchTx: one multi-row inbox insert, the handlers under one
// savepoint, their queued INSERTs sent with its release) against one
// message per transaction (Process), on workers concurrent workers each (1
// in the suite). Both sides run the same handler.
//
// With batchHandler, side A hands the batch's new messages to a
// BatchHandler writing them with one multi-row INSERT
// (ProcessBatchWithTx), the pair inbox_batch_handler_vs_single.
func inboxBatchVsSingle[TTx any](e *Env, d store.Driver[TTx], storeName string, batchHandler bool, workers int) Pair {
	var (
		in       *inbox.Inbox[TTx]
		insert   string
		seq      atomic.Int64
		consumer = e.name("bench")
	)
	p := Pair{Name: "inbox_batch_vs_single_" + storeName}
	if batchHandler {
		p.Name = "inbox_batch_handler_vs_single_" + storeName
	}
	p.Setup = func(ctx context.Context) (err error) {
		if in, err = inbox.New(d, inbox.Config{}); err != nil {
			return err
		}
		insert, err = businessTable(ctx, d, e.name("rows_inbox_batch"))
		return err
	}
	// Both sides run this handler, the business INSERT through
	// inbox.Exec: at once in Process (single), queued and sent with the
	// fast pass's savepoint release in a batch.
	h := func(ctx context.Context, tx TTx, msg idem.Message) error {
		return inbox.Exec(ctx, d, tx, insert, msg.ID, msg.Payload, store.Micros(time.Now()))
	}
	p.A = Side{Label: "batch100", Run: func(ctx context.Context, budget time.Duration) (Sample, error) {
		return throughput(ctx, budget, workers, func(ctx context.Context, _ int) (int, error) {
			msgs := make([]idem.Message, batchSize)
			for i := range msgs {
				msgs[i] = idem.Message{ID: "m-" + strconv.FormatInt(seq.Add(1), 10), Subject: "bench", Payload: payload}
			}
			err := store.InTx(ctx, d, func(tx TTx) error {
				var out []inbox.Outcome
				var err error
				if batchHandler {
					out, err = in.ProcessBatchWithTx(ctx, tx, consumer, msgs, func(ctx context.Context, tx TTx, ms []idem.Message) error {
						return insertMany(ctx, d, tx, insert, ms)
					}, h)
				} else {
					out, err = in.ProcessBatchTx(ctx, tx, consumer, msgs, h)
				}
				if err != nil {
					return err
				}
				for i, o := range out {
					if o.Err != nil || o.Result != inbox.Processed {
						return fmt.Errorf("message %s: %v %v, want processed", msgs[i].ID, o.Result, o.Err)
					}
				}
				return nil
			})
			return batchSize, err
		})
	}}
	p.B = Side{Label: "single", Run: func(ctx context.Context, budget time.Duration) (Sample, error) {
		return throughput(ctx, budget, workers, func(ctx context.Context, _ int) (int, error) {
			msg := idem.Message{ID: "m-" + strconv.FormatInt(seq.Add(1), 10), Subject: "bench", Payload: payload, Attempt: 1}
			_, err := in.Process(ctx, consumer, msg, h)
			return 1, err
		})
	}}
	return p
}

// insertMany writes ms with one multi-row form of insert (whose VALUES
// clause is "($1, $2, $3)"), through inbox.Exec: in a batch's fast pass
// the statement travels with the savepoint's release.
func insertMany[TTx any](ctx context.Context, d store.Driver[TTx], tx TTx, insert string, ms []idem.Message) error {
	head, _, _ := strings.Cut(insert, "VALUES")
	var b strings.Builder
	b.WriteString(head + "VALUES ")
	args := make([]any, 0, 3*len(ms))
	now := store.Micros(time.Now())
	for i, m := range ms {
		if i > 0 {
			b.WriteByte(',')
		}
		fmt.Fprintf(&b, "($%d, $%d, $%d)", 3*i+1, 3*i+2, 3*i+3)
		args = append(args, m.ID, m.Payload, now)
	}
	return inbox.Exec(ctx, d, tx, b.String(), args...)
}
