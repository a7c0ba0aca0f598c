package bench

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/idemkit/idem/effect"
	"github.com/idemkit/idem/internal/driverkit"
	"github.com/idemkit/idem/store"
)

// drainKind is the effect kind the effect_drain pair schedules.
const drainKind = "bench.email"

// drainConcurrency is the effect worker's Concurrency in effect_drain: the
// calls in flight against the no-op provider, so also the largest batch of
// completions the worker records in one round trip.
const drainConcurrency = 128

// drainWriters is the number of goroutines of the per-row baseline.
const drainWriters = 8

// effectDrain: A drains N scheduled effects with the effect worker against
// a no-op provider (timed from the worker's start until all N are recorded
// completed: claims, calls, batched fenced completions); B marks the same
// number of scheduled rows done with one autocommit UPDATE per row from 8
// goroutines (the database's price of recording each completion on its
// own). Both sides start each round on an emptied effects table with N
// fresh pending rows, scheduled untimed through the ledger.
func effectDrain(e *Env, storeName string) Pair {
	var (
		d     store.Driver[any]
		l     *effect.Ledger[any]
		table string
		estA  = 5000.0
		n     int
		round atomic.Int64
	)
	p := Pair{Name: "effect_drain_" + storeName}
	p.Setup = func(ctx context.Context) (err error) {
		pd, err := e.pgxNS(ctx)
		if err != nil {
			return err
		}
		d = driverkit.Erase(pd) // the pgx driver, its abilities forwarded
		table = d.Table("effects")
		l, err = effect.New(d, effect.Config{})
		return err
	}
	// fresh empties the table and schedules count pending effects, due now.
	fresh := func(ctx context.Context, count int) ([]string, error) {
		if _, err := d.Pool().Exec(ctx, `TRUNCATE `+table); err != nil {
			return nil, err
		}
		r := round.Add(1)
		keys := make([]string, count)
		for i := range keys {
			keys[i] = fmt.Sprintf("drain:%d:%d", r, i)
		}
		for i := 0; i < count; i += 500 {
			err := store.InTx(ctx, d, func(tx any) error {
				for _, k := range keys[i:min(i+500, count)] {
					if _, _, err := l.ScheduleTx(ctx, tx, effect.Effect{Key: k, Kind: drainKind, Payload: payload}); err != nil {
						return err
					}
				}
				return nil
			})
			if err != nil {
				return nil, err
			}
		}
		return keys, nil
	}
	p.A = Side{Label: "worker", Run: func(ctx context.Context, budget time.Duration) (Sample, error) {
		n = max(500, int(estA*budget.Seconds()*0.8))
		if _, err := fresh(ctx, n); err != nil {
			return Sample{}, err
		}
		var calls atomic.Int64
		w, err := effect.NewWorker(l, effect.WorkerConfig[any]{Concurrency: drainConcurrency})
		if err != nil {
			return Sample{}, err
		}
		if err := w.Register(drainKind, func(context.Context, string, []byte) ([]byte, error) {
			calls.Add(1)
			return nil, nil
		}); err != nil {
			return Sample{}, err
		}
		wctx, stop := context.WithCancel(ctx)
		done := make(chan error, 1)
		start := time.Now()
		go func() { done <- w.Run(wctx) }()
		defer func() { stop(); <-done }()
		for {
			if calls.Load() >= int64(n) {
				var left int
				if err := d.Pool().QueryRow(ctx, `SELECT count(*) FROM `+table+` WHERE state <> 'completed'`).Scan(&left); err != nil {
					return Sample{}, err
				}
				if left == 0 {
					break
				}
			}
			select {
			case err := <-done:
				return Sample{}, fmt.Errorf("worker stopped: %v", err)
			case <-ctx.Done():
				return Sample{}, ctx.Err()
			case <-time.After(time.Millisecond):
			}
		}
		s := Sample{Ops: n, Elapsed: time.Since(start)}
		estA = s.PerSecond()
		return s, nil
	}}
	// The baseline's UPDATE sets what the ledger's completion sets, one
	// row per autocommit statement (the bench's own SQL on the effects
	// table: it is the per-row price the worker's batches are measured
	// against).
	mark := `UPDATE ` + `%s` + ` SET state = 'completed', result = $2, last_error = '', lease_until = 0,
		next_attempt_at = 0, completed_at = $3, updated_at = $3
		WHERE effect_key = $1 AND state = 'pending'`
	p.B = Side{Label: "per_row_update", Run: func(ctx context.Context, _ time.Duration) (Sample, error) {
		count := max(n, 500)
		keys, err := fresh(ctx, count)
		if err != nil {
			return Sample{}, err
		}
		sqlText := fmt.Sprintf(mark, table)
		var next atomic.Int64
		var wg sync.WaitGroup
		errc := make(chan error, drainWriters)
		start := time.Now()
		for range drainWriters {
			wg.Go(func() {
				for {
					i := int(next.Add(1)) - 1
					if i >= len(keys) {
						return
					}
					now := store.Micros(time.Now())
					m, err := d.Pool().Exec(ctx, sqlText, keys[i], []byte{}, now)
					if err == nil && m != 1 {
						err = fmt.Errorf("marked %d rows for %s", m, keys[i])
					}
					if err != nil {
						errc <- err
						return
					}
				}
			})
		}
		wg.Wait()
		s := Sample{Ops: count, Elapsed: time.Since(start)}
		close(errc)
		if err := <-errc; err != nil {
			return Sample{}, err
		}
		return s, nil
	}}
	return p
}
