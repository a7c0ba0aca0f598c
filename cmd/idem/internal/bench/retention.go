package bench

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/inbox"
	"github.com/idemkit/idem/internal/driverkit"
	"github.com/idemkit/idem/migrate"
	"github.com/idemkit/idem/outbox"
	"github.com/idemkit/idem/retention"
	"github.com/idemkit/idem/store"
	"github.com/idemkit/idem/store/pgxstore"
)

// DefaultRetentionRows is the number of expired inbox rows each side of
// retention_drop_vs_delete expires per round.
const DefaultRetentionRows = 5_000_000

// retentionDays is how many daily partitions the expired rows spread over.
const retentionDays = 5

// writerWindow is the least time over which the writer's rate is taken.
const writerWindow = 3 * time.Second

// retentionBatch is the plain layout's GC batch size in the pair: ten
// times the default, the most a busy database would let one DELETE take.
const retentionBatch = 10_000

// retentionDropVsDelete: A expires rows inbox rows by a GC pass on the
// partitioned layout (their partitions detached and dropped); B expires
// the same rows by a GC pass on the plain layout (bounded batch DELETEs of
// retentionBatch rows). Each round starts, untimed, from an emptied inbox
// seeded with the rows, expired over five days ten days ago. During the
// timed pass a writer goroutine keeps recording new messages through
// inbox.Process on the same table; the samples carry the WAL bytes the
// pass wrote (the writer's included, so the side that takes longer also
// counts more of the writer's WAL), the writer's rate during the pass and
// its rate alone just before it (writer_idle_per_s: the layouts' inserts
// differ in cost, so compare each side's two rates).
func retentionDropVsDelete(e *Env, rows int) Pair {
	var plain, part *pgxstore.Driver
	seedDay := time.Now().UTC().Truncate(24*time.Hour).AddDate(0, 0, -10)
	pcfg := retention.PartitionConfig{Ahead: 20 * 24 * time.Hour}
	var round atomic.Int64
	p := Pair{Name: "retention_drop_vs_delete"}
	p.Setup = func(ctx context.Context) error {
		var err error
		pool := e.pg.PgxPool()
		for _, dd := range []struct {
			d      **pgxstore.Driver
			layout store.Layout
		}{{&plain, store.LayoutPlain}, {&part, store.LayoutPartitioned}} {
			schema := e.name(e.schema)
			e.extraSchemas = append(e.extraSchemas, schema)
			if *dd.d, err = pgxstore.New(pool, pgxstore.Config{Names: store.Names{Schema: schema, Layout: dd.layout}}); err != nil {
				return err
			}
			if err := migrate.Up(ctx, *dd.d); err != nil {
				return err
			}
		}
		_, err = retention.Partition(ctx, part, pcfg, seedDay)
		return err
	}
	seed := func(ctx context.Context, d *pgxstore.Driver) error {
		q := d.Pool()
		if _, err := q.Exec(ctx, `TRUNCATE `+d.Table("inbox")); err != nil {
			return err
		}
		if d == part {
			if _, err := retention.Partition(ctx, part, pcfg, seedDay); err != nil { // recreate the dropped partitions
				return err
			}
		}
		_, err := q.Exec(ctx, `INSERT INTO `+d.Table("inbox")+` (consumer, message_id, fingerprint, state, received_at, processed_at, expires_at)
SELECT 'seed', 'm-' || $1::text || '-' || g, '\x01'::bytea, 'completed', $2::bigint, $2::bigint,
       $2::bigint + (g % $4::bigint) * 86400000000 + (g % 86400) * 1000000
  FROM generate_series(1, $3::bigint) AS g`, fmt.Sprint(round.Add(1)), store.Micros(seedDay), rows, int64(retentionDays))
		if err == nil {
			_, err = q.Exec(ctx, `ANALYZE `+d.Table("inbox"))
		}
		return err
	}
	side := func(label string, d **pgxstore.Driver, batch int) Side {
		return Side{Label: label, Run: func(ctx context.Context, _ time.Duration) (Sample, error) {
			if err := seed(ctx, *d); err != nil {
				return Sample{}, fmt.Errorf("seed: %w", err)
			}
			gc, err := retention.New(*d, retention.Config{BatchSize: batch, Partitions: pcfg})
			if err != nil {
				return Sample{}, err
			}
			in, err := inbox.New(driverkit.Erase(*d), inbox.Config{})
			if err != nil {
				return Sample{}, err
			}
			var lsn0, lsn1 string
			wctx, stop := context.WithCancel(ctx)
			var written atomic.Int64
			var wg sync.WaitGroup
			var werr error
			wg.Add(1)
			go func() {
				defer wg.Done()
				r := round.Load()
				for i := 0; wctx.Err() == nil; i++ {
					msg := idem.Message{ID: fmt.Sprintf("w-%d-%d", r, i), Payload: []byte("x")}
					if _, err := in.Process(wctx, "writer", msg, func(context.Context, any, idem.Message) error { return nil }); err != nil {
						if wctx.Err() == nil {
							werr = err
						}
						return
					}
					written.Add(1)
				}
			}()
			// The writer alone first: its rate without a pass running.
			time.Sleep(writerWindow)
			idle := written.Load()
			if err := (*d).Pool().QueryRow(ctx, `SELECT pg_current_wal_insert_lsn()::text`).Scan(&lsn0); err != nil {
				stop()
				wg.Wait()
				return Sample{}, err
			}
			t0 := time.Now()
			rep, err := gc.RunOnce(ctx)
			elapsed := time.Since(t0)
			// The writer's rate is taken over the pass, and at least
			// writerWindow, so a pass of milliseconds still measures it.
			if rest := writerWindow - elapsed; err == nil && rest > 0 {
				select {
				case <-time.After(rest):
				case <-ctx.Done():
				}
			}
			window := time.Since(t0)
			stop()
			wg.Wait()
			if err != nil {
				return Sample{}, err
			}
			if werr != nil {
				return Sample{}, fmt.Errorf("writer: %w", werr)
			}
			var wal float64
			if err := (*d).Pool().QueryRow(ctx, `SELECT pg_current_wal_insert_lsn()::text`).Scan(&lsn1); err != nil {
				return Sample{}, err
			}
			if err := (*d).Pool().QueryRow(ctx, `SELECT pg_wal_lsn_diff($1::pg_lsn, $2::pg_lsn)::float8`, lsn1, lsn0).Scan(&wal); err != nil {
				return Sample{}, err
			}
			var left int64
			if err := (*d).Pool().QueryRow(ctx, `SELECT count(*) FROM `+(*d).Table("inbox")+` WHERE consumer = 'seed'`).Scan(&left); err != nil {
				return Sample{}, err
			}
			if left != 0 {
				return Sample{}, fmt.Errorf("%d expired rows left after the pass (report %+v)", left, rep)
			}
			return Sample{Ops: rows, Elapsed: elapsed, Extra: map[string]float64{
				"wal_bytes":         wal,
				"writer_per_s":      float64(written.Load()-idle) / window.Seconds(),
				"writer_idle_per_s": float64(idle) / writerWindow.Seconds(),
				"expire_seconds":    elapsed.Seconds(),
			}}, nil
		}}
	}
	p.A = side("partition-drop", &part, retentionBatch)
	p.B = side("batch-delete", &plain, retentionBatch)
	return p
}

// partitionedWorkers is the number of concurrent consumers of
// inbox_partitioned_vs_plain_postgres.
const partitionedWorkers = 8

// inboxPartitionedVsPlain: A records new messages through inbox.Process on
// the partitioned layout (an advisory lock and a not-exists insert
// through the layout's function), B the same on the plain layout (one
// insert against the primary key), 8 workers each, with a business row
// per message in the same transaction — what the layout costs the hot
// path of every consumer.
func inboxPartitionedVsPlain(e *Env) Pair {
	var seq atomic.Int64
	type side struct {
		in  *inbox.Inbox[any]
		biz string
	}
	return layoutPair(e, "inbox_partitioned_vs_plain_postgres", func(d store.Driver[any], biz string) (*side, error) {
		in, err := inbox.New(d, inbox.Config{})
		return &side{in: in, biz: biz}, err
	}, func(ctx context.Context, s *side, budget time.Duration) (Sample, error) {
		return throughput(ctx, budget, partitionedWorkers, func(ctx context.Context, _ int) (int, error) {
			msg := idem.Message{ID: fmt.Sprintf("m-%d", seq.Add(1)), Payload: []byte(`{"order":1}`)}
			_, err := s.in.Process(ctx, "bench", msg, func(ctx context.Context, tx any, m idem.Message) error {
				_, err := s.in.Driver().Tx(tx).Exec(ctx, `INSERT INTO `+s.biz+` (id, payload) VALUES ($1, $2)`, m.ID, m.Payload)
				return err
			})
			return 1, err
		})
	})
}

// layoutPair is a pair of the partitioned layout (side A, "partitioned")
// against the plain one (side B, "plain"): newSide prepares a side on its
// store and business table, run runs one round of it.
func layoutPair[S any](e *Env, name string, newSide func(d store.Driver[any], biz string) (S, error), run func(ctx context.Context, s S, budget time.Duration) (Sample, error)) Pair {
	p := Pair{Name: name}
	var sides [2]S
	p.Setup = func(ctx context.Context) error {
		ds, biz, err := layoutStores(ctx, e)
		if err != nil {
			return err
		}
		for i, d := range ds {
			if sides[i], err = newSide(d, biz[i]); err != nil {
				return err
			}
		}
		return nil
	}
	side := func(label string, i int) Side {
		return Side{Label: label, Run: func(ctx context.Context, budget time.Duration) (Sample, error) { return run(ctx, sides[i], budget) }}
	}
	p.A = side("partitioned", 0)
	p.B = side("plain", 1)
	return p
}

// layoutStores returns two migrated pgx stores on schemas of their own,
// [0] converted to the partitioned layout and [1] plain, each with a
// business table (its qualified name in biz).
func layoutStores(ctx context.Context, e *Env) (ds [2]store.Driver[any], biz [2]string, err error) {
	for i, layout := range []store.Layout{store.LayoutPartitioned, store.LayoutPlain} {
		schema := e.name(e.schema)
		e.extraSchemas = append(e.extraSchemas, schema)
		d, err := pgxstore.New(e.pg.PgxPool(), pgxstore.Config{Names: store.Names{Schema: schema, Layout: layout}})
		if err != nil {
			return ds, biz, err
		}
		if err := migrate.Up(ctx, d); err != nil {
			return ds, biz, err
		}
		if layout == store.LayoutPartitioned {
			if _, err := retention.Partition(ctx, d, retention.PartitionConfig{}, time.Now()); err != nil {
				return ds, biz, err
			}
		}
		biz[i] = `"` + schema + `".bench_business`
		if _, err := d.Pool().Exec(ctx, `CREATE TABLE `+biz[i]+` (id text PRIMARY KEY, payload bytea NOT NULL)`); err != nil {
			return ds, biz, err
		}
		ds[i] = driverkit.Erase(d)
	}
	return ds, biz, nil
}

// outboxPartitionedVsPlain: A enqueues events through outbox.EnqueueTx on
// the partitioned layout (a lock per event and a not-exists insert
// through the layout's function), B the same on the plain layout (one
// insert against the (source, event_id) unique key), 8 producers each,
// every transaction a business row and one event with its own ordering
// key — what the layout costs a producer.
func outboxPartitionedVsPlain(e *Env) Pair {
	var seq atomic.Int64
	type side struct {
		d   store.Driver[any]
		ob  *outbox.Outbox[any]
		biz string
	}
	return layoutPair(e, "outbox_partitioned_vs_plain_postgres", func(d store.Driver[any], biz string) (*side, error) {
		ob, err := outbox.New(d, outbox.Config{})
		return &side{d: d, ob: ob, biz: biz}, err
	}, func(ctx context.Context, s *side, budget time.Duration) (Sample, error) {
		return throughput(ctx, budget, partitionedWorkers, func(ctx context.Context, _ int) (int, error) {
			id := fmt.Sprintf("order-%d", seq.Add(1))
			return 1, store.InTx(ctx, s.d, func(tx any) error {
				if _, err := s.d.Tx(tx).Exec(ctx, `INSERT INTO `+s.biz+` (id, payload) VALUES ($1, $2)`, id, payload); err != nil {
					return err
				}
				_, err := s.ob.EnqueueTx(ctx, tx, outbox.Event{Type: "bench.order.created", Topic: "orders", Key: id, Payload: payload})
				return err
			})
		})
	})
}

// outboxRelayPartitionedVsPlain: A drains N committed events through the
// relay to JetStream on the partitioned layout (claims and marks by seq,
// one probe per partition), B the same on the plain layout (claims by
// ctid), timed from the relay's start until the last event is marked
// published.
func outboxRelayPartitionedVsPlain(e *Env) Pair {
	type side struct {
		d   store.Driver[any]
		ob  *outbox.Outbox[any]
		est float64
	}
	return layoutPair(e, "outbox_relay_partitioned_vs_plain_postgres", func(d store.Driver[any], _ string) (*side, error) {
		ob, err := outbox.New(d, outbox.Config{})
		return &side{d: d, ob: ob, est: 10000}, err
	}, func(ctx context.Context, s *side, budget time.Duration) (Sample, error) {
		sm, err := relayDrain(ctx, e, s.d, s.ob, "relay-layout", max(1000, int(s.est*budget.Seconds()*0.8)))
		if err == nil {
			s.est = sm.PerSecond()
		}
		return sm, err
	})
}
