package main

// The River side of "idem bench --peer river" (River v0.51 on pgx v5 through
// riverpgxv5, on the same PostgreSQL as idem):
//
//   - river_schedule: each of --workers producers loops for --duration over
//     transactions that insert one business row and one unique job
//     (Client.InsertTx with UniqueOpts{ByArgs: true}; the args carry the
//     order id, so every job is new);
//   - river_work: --events jobs are inserted first (not timed, InsertManyFast);
//     then a client with one queue of --workers MaxWorkers (River's other
//     settings at their defaults) works them against a no-op worker, timed
//     from Start until all are recorded completed in river_job.
//
// River's tables live in --river-schema, migrated (rivermigrate, up) at the
// start of every round; the round's rows are truncated first, so every
// round starts on an empty job table.

import (
	"context"
	"encoding/json"
	"fmt"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
	"github.com/riverqueue/river/rivermigrate"
)

// benchArgs is the unit of work: the order it belongs to and the same
// 128-byte JSON body the idem side schedules.
type benchArgs struct {
	OrderID string          `json:"order_id"`
	Body    json.RawMessage `json:"body"`
}

// Kind is River's job kind of benchArgs.
func (benchArgs) Kind() string { return "bench_email" }

// noopWorker stands for the provider call: it returns at once.
type noopWorker struct {
	river.WorkerDefaults[benchArgs]
	calls *atomic.Int64
}

func (w *noopWorker) Work(context.Context, *river.Job[benchArgs]) error {
	w.calls.Add(1)
	return nil
}

// riverSetup connects a pool of size conns, migrates schema and empties
// its job table.
func riverSetup(ctx context.Context, url, schema string, conns int) (*pgxpool.Pool, error) {
	cfg, err := pgxpool.ParseConfig(url)
	if err != nil {
		return nil, err
	}
	cfg.MaxConns = int32(conns)
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return nil, err
	}
	if _, err := pool.Exec(ctx, `CREATE SCHEMA IF NOT EXISTS `+pgx.Identifier{schema}.Sanitize()); err != nil {
		pool.Close()
		return nil, err
	}
	m, err := rivermigrate.New(riverpgxv5.New(pool), &rivermigrate.Config{Schema: schema})
	if err != nil {
		pool.Close()
		return nil, err
	}
	if _, err := m.Migrate(ctx, rivermigrate.DirectionUp, nil); err != nil {
		pool.Close()
		return nil, fmt.Errorf("river migrate: %w", err)
	}
	if _, err := pool.Exec(ctx, `TRUNCATE `+pgx.Identifier{schema, "river_job"}.Sanitize()); err != nil {
		pool.Close()
		return nil, err
	}
	return pool, nil
}

func riverSchedule(ctx context.Context, url, schema, tag string, d time.Duration, workers int) (result, error) {
	pool, err := riverSetup(ctx, url, schema, workers+2)
	if err != nil {
		return result{}, err
	}
	defer pool.Close()
	table := pgx.Identifier{"river_produce_" + tag}.Sanitize()
	if _, err := pool.Exec(ctx, `CREATE TABLE `+table+` (id text PRIMARY KEY, payload bytea NOT NULL, created_at bigint NOT NULL)`); err != nil {
		return result{}, err
	}
	var calls atomic.Int64
	ws := river.NewWorkers()
	river.AddWorker(ws, &noopWorker{calls: &calls})
	client, err := river.NewClient(riverpgxv5.New(pool), &river.Config{Schema: schema, Workers: ws}) // insert-only: no Queues
	if err != nil {
		return result{}, err
	}
	insert := `INSERT INTO ` + table + ` (id, payload, created_at) VALUES ($1, $2, $3)`
	opts := &river.InsertOpts{UniqueOpts: river.UniqueOpts{ByArgs: true}}
	return producers(d, workers, func(id string) error {
		return pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
			if _, err := tx.Exec(ctx, insert, id, payload, time.Now().UnixMicro()); err != nil {
				return err
			}
			res, err := client.InsertTx(ctx, tx, benchArgs{OrderID: id, Body: payload}, opts)
			if err == nil && res.UniqueSkippedAsDuplicate {
				err = fmt.Errorf("job of %s skipped as a duplicate", id)
			}
			return err
		})
	})
}

func riverWork(ctx context.Context, url, schema string, n, workers int, cooldown time.Duration) (result, error) {
	pool, err := riverSetup(ctx, url, schema, 24)
	if err != nil {
		return result{}, err
	}
	defer pool.Close()
	var calls atomic.Int64
	ws := river.NewWorkers()
	river.AddWorker(ws, &noopWorker{calls: &calls})
	client, err := river.NewClient(riverpgxv5.New(pool), &river.Config{
		Schema:        schema,
		Workers:       ws,
		Queues:        map[string]river.QueueConfig{river.QueueDefault: {MaxWorkers: workers}},
		FetchCooldown: cooldown,
	})
	if err != nil {
		return result{}, err
	}
	// The N committed jobs, inserted before the clock starts.
	for i := 0; i < n; i += 1000 {
		params := make([]river.InsertManyParams, 0, 1000)
		for j := i; j < min(i+1000, n); j++ {
			params = append(params, river.InsertManyParams{Args: benchArgs{OrderID: "w-" + strconv.Itoa(j), Body: payload}})
		}
		if _, err := client.InsertManyFast(ctx, params); err != nil {
			return result{}, err
		}
	}
	count := `SELECT count(*) FROM ` + pgx.Identifier{schema, "river_job"}.Sanitize() + ` WHERE state = 'completed'`
	start := time.Now()
	if err := client.Start(ctx); err != nil {
		return result{}, err
	}
	defer func() {
		sctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = client.Stop(sctx)
	}()
	for {
		if calls.Load() >= int64(n) {
			var done int
			if err := pool.QueryRow(ctx, count).Scan(&done); err != nil {
				return result{}, err
			}
			if done >= n {
				elapsed := time.Since(start)
				if done != n {
					return result{}, fmt.Errorf("%d jobs completed for %d inserted", done, n)
				}
				return result{Ops: n, ElapsedNs: elapsed.Nanoseconds()}, nil
			}
		}
		if time.Since(start) > 5*time.Minute {
			return result{}, fmt.Errorf("only %d of %d jobs worked after 5 minutes", calls.Load(), n)
		}
		time.Sleep(time.Millisecond)
	}
}
