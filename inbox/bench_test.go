package inbox_test

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/inbox"
	"github.com/idemkit/idem/internal/testdb"
	"github.com/idemkit/idem/store"
)

// Compare BenchmarkInbox with BenchmarkPlainTx (the same business INSERT in
// its own transaction, without idem) on each driver:
//
//	go test -run '^$' -bench 'Inbox|PlainTx' ./inbox/
//
// and BenchmarkInboxBatch100 (per message) with BenchmarkInbox for the
// batch speed-up.

func benchDrivers(b *testing.B, f func(b *testing.B, run benchEnv)) {
	b.Run("sqlite", func(b *testing.B) { f(b, newBenchEnv(b, testdb.SQLite(b))) })
	b.Run("pgx", func(b *testing.B) { f(b, newBenchEnv(b, testdb.Pgx(b))) })
}

type benchEnv struct {
	plain  func(ctx context.Context, id string) error
	single func(ctx context.Context, m idem.Message) error
	batch  func(ctx context.Context, ms []idem.Message) error
	// batchQueued is batch with the handler writing through inbox.Exec;
	// batchHandler hands the batch to one multi-row INSERT (also through
	// inbox.Exec), as idem bench's inbox_batch_handler_vs_single does.
	batchQueued, batchHandler func(ctx context.Context, ms []idem.Message) error
}

func newBenchEnv[TTx any](b *testing.B, d store.Driver[TTx]) benchEnv {
	testdb.Exec(b, d, `CREATE TABLE bench_biz (id text PRIMARY KEY, payload text NOT NULL)`)
	ib, err := inbox.New(d, inbox.Config{})
	if err != nil {
		b.Fatal(err)
	}
	insert := func(ctx context.Context, tx TTx, id string, payload []byte) error {
		_, err := d.Tx(tx).Exec(ctx, `INSERT INTO bench_biz (id, payload) VALUES ($1, $2)`, id, string(payload))
		return err
	}
	h := func(ctx context.Context, tx TTx, m idem.Message) error { return insert(ctx, tx, m.ID, m.Payload) }
	hq := func(ctx context.Context, tx TTx, m idem.Message) error {
		return inbox.Exec(ctx, d, tx, `INSERT INTO bench_biz (id, payload) VALUES ($1, $2)`, m.ID, string(m.Payload))
	}
	bh := func(ctx context.Context, tx TTx, ms []idem.Message) error {
		var sql strings.Builder
		sql.WriteString(`INSERT INTO bench_biz (id, payload) VALUES `)
		args := make([]any, 0, 2*len(ms))
		for i, m := range ms {
			if i > 0 {
				sql.WriteByte(',')
			}
			sql.WriteString("($" + strconv.Itoa(2*i+1) + ", $" + strconv.Itoa(2*i+2) + ")")
			args = append(args, m.ID, string(m.Payload))
		}
		return inbox.Exec(ctx, d, tx, sql.String(), args...)
	}
	outcomes := func(out []inbox.Outcome, err error) error {
		for _, o := range out {
			if o.Err != nil {
				return o.Err
			}
		}
		return err
	}
	return benchEnv{
		batchQueued: func(ctx context.Context, ms []idem.Message) error {
			return outcomes(ib.ProcessBatch(ctx, "bench", ms, hq))
		},
		batchHandler: func(ctx context.Context, ms []idem.Message) error {
			var out []inbox.Outcome
			err := store.InTx(ctx, d, func(tx TTx) error {
				var err error
				out, err = ib.ProcessBatchWithTx(ctx, tx, "bench", ms, bh, hq)
				return err
			})
			return outcomes(out, err)
		},
		plain: func(ctx context.Context, id string) error {
			return store.InTx(ctx, d, func(tx TTx) error { return insert(ctx, tx, id, []byte(`{"n":1}`)) })
		},
		single: func(ctx context.Context, m idem.Message) error { _, err := ib.Process(ctx, "bench", m, h); return err },
		batch: func(ctx context.Context, ms []idem.Message) error {
			out, err := ib.ProcessBatch(ctx, "bench", ms, h)
			for _, o := range out {
				if o.Err != nil {
					return o.Err
				}
			}
			return err
		},
	}
}

var benchSeq atomic.Int64

func nextID(prefix string) string { return fmt.Sprintf("%s-%d", prefix, benchSeq.Add(1)) }

func BenchmarkPlainTx(b *testing.B) {
	benchDrivers(b, func(b *testing.B, e benchEnv) {
		ctx := context.Background()
		for b.Loop() {
			if err := e.plain(ctx, nextID("p")); err != nil {
				b.Fatal(err)
			}
		}
	})
}

func BenchmarkInbox(b *testing.B) {
	benchDrivers(b, func(b *testing.B, e benchEnv) {
		ctx := context.Background()
		for b.Loop() {
			if err := e.single(ctx, idem.Message{ID: nextID("i"), Payload: []byte(`{"n":1}`)}); err != nil {
				b.Fatal(err)
			}
		}
	})
}

// BenchmarkInboxBatch100 reports ns/op per message, processed in batches of 100.
func BenchmarkInboxBatch100(b *testing.B) {
	benchDrivers(b, func(b *testing.B, e benchEnv) {
		ctx := context.Background()
		batch := make([]idem.Message, 100)
		for i := 0; i < b.N; i += 100 {
			for j := range batch {
				batch[j] = idem.Message{ID: nextID("b"), Payload: []byte(`{"n":1}`)}
			}
			if err := e.batch(ctx, batch); err != nil {
				b.Fatal(err)
			}
		}
	})
}

// BenchmarkInboxBatch100Queued is BenchmarkInboxBatch100 with the handler
// writing through inbox.Exec (its INSERTs sent with the fast pass's
// savepoint release).
func BenchmarkInboxBatch100Queued(b *testing.B) {
	benchBatch(b, func(e benchEnv) func(context.Context, []idem.Message) error { return e.batchQueued })
}

// BenchmarkInboxBatchHandler100 reports ns/op per message, batches of 100
// handed to one BatchHandler call (one multi-row INSERT).
func BenchmarkInboxBatchHandler100(b *testing.B) {
	benchBatch(b, func(e benchEnv) func(context.Context, []idem.Message) error { return e.batchHandler })
}

func benchBatch(b *testing.B, pick func(benchEnv) func(context.Context, []idem.Message) error) {
	benchDrivers(b, func(b *testing.B, e benchEnv) {
		ctx := context.Background()
		run := pick(e)
		batch := make([]idem.Message, 100)
		for i := 0; i < b.N; i += 100 {
			for j := range batch {
				batch[j] = idem.Message{ID: nextID("q"), Payload: []byte(`{"order_id":"00000000-0000-0000-0000-000000000000","amount_cents":4200,"currency":"EUR","seats":["A1","A2"],"x":"y"}`)}
			}
			if err := run(ctx, batch); err != nil {
				b.Fatal(err)
			}
		}
	})
}

// Parallel variants: 8 concurrent workers.
func BenchmarkPlainTxParallel8(b *testing.B) {
	benchDrivers(b, func(b *testing.B, e benchEnv) {
		b.SetParallelism(8)
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				if err := e.plain(context.Background(), nextID("pp")); err != nil {
					b.Error(err)
					return
				}
			}
		})
	})
}

func BenchmarkInboxParallel8(b *testing.B) {
	benchDrivers(b, func(b *testing.B, e benchEnv) {
		b.SetParallelism(8)
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				if err := e.single(context.Background(), idem.Message{ID: nextID("ip"), Payload: []byte(`{"n":1}`)}); err != nil {
					b.Error(err)
					return
				}
			}
		})
	})
}
