package inbox_test

import (
	"context"
	"fmt"
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
	return benchEnv{
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
