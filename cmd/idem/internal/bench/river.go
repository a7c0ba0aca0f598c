package bench

import (
	"context"
	"fmt"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/idemkit/idem/effect"
	"github.com/idemkit/idem/internal/driverkit"
	"github.com/idemkit/idem/store"
)

// riverKind is the effect kind of the River pairs (River's side: the job
// kind bench_email of the peer harness).
const riverKind = "bench.email"

// riverFetchCooldown is River's FetchCooldown in peer_river_work: its
// minimum. At River's default (100 ms) a queue of 128 workers fetches at
// most 128 jobs per 100 ms, about 1,280 jobs/s, which would measure the
// setting rather than River.
const riverFetchCooldown = time.Millisecond

// riverSchema returns a fresh schema name for River's tables in this run
// (created and migrated by the peer harness, dropped at Close).
func (e *Env) riverSchema() string {
	s := e.name(e.schema + "_river")
	e.extraSchemas = append(e.extraSchemas, s)
	return s
}

// riverLedger is what both River pairs set up on idem's side: the peer's
// binary (built once), a fresh pgx schema (River runs on pgx too) and the
// effect ledger on it.
func (e *Env) riverLedger(ctx context.Context) (store.Driver[any], *effect.Ledger[any], error) {
	if _, err := e.peerBinary(ctx); err != nil {
		return nil, nil, err
	}
	pd, err := e.pgxNS(ctx)
	if err != nil {
		return nil, nil, err
	}
	d := driverkit.Erase(pd) // the pgx driver, its abilities forwarded
	l, err := effect.New(d, effect.Config{})
	return d, l, err
}

// peerRiverSchedule: 8 producers, each transaction one business row plus
// one unique unit of work scheduled for later. idem: effect.ScheduleTx (the
// key is unique by the effects table's primary key); River: Client.InsertTx
// with UniqueOpts{ByArgs: true} (unique by River's unique_key index). Both
// on pgx against the same database; every round starts on an empty table.
func peerRiverSchedule(e *Env) Pair {
	var (
		d            store.Driver[any]
		l            *effect.Ledger[any]
		insert, rs   string
		seq, rounds  atomic.Int64
		effectsTable string
	)
	p := Pair{Name: "peer_river_schedule"}
	p.Setup = func(ctx context.Context) (err error) {
		if d, l, err = e.riverLedger(ctx); err != nil {
			return err
		}
		effectsTable, rs = d.Table("effects"), e.riverSchema()
		insert, err = businessTable(ctx, d, e.name("rows_idem_schedule"))
		return err
	}
	p.A = Side{Label: "idem", Run: func(ctx context.Context, budget time.Duration) (Sample, error) {
		if _, err := d.Pool().Exec(ctx, `TRUNCATE `+effectsTable); err != nil {
			return Sample{}, err
		}
		return throughput(ctx, budget, peerProducers, func(ctx context.Context, _ int) (int, error) {
			id := "o-" + strconv.FormatInt(seq.Add(1), 10)
			return 1, store.InTx(ctx, d, func(tx any) error {
				if _, err := d.Tx(tx).Exec(ctx, insert, id, payload, store.Micros(time.Now())); err != nil {
					return err
				}
				_, created, err := l.ScheduleTx(ctx, tx, effect.Effect{Key: "email:" + id, Kind: riverKind, Payload: payload})
				if err == nil && !created {
					err = fmt.Errorf("effect of %s already scheduled", id)
				}
				return err
			})
		})
	}}
	p.B = Side{Label: "river", Run: func(ctx context.Context, budget time.Duration) (Sample, error) {
		return e.runPeer(ctx, "--pair", "river_schedule", "--river-schema", rs,
			"--tag", e.name("s"+strconv.FormatInt(rounds.Add(1), 10)),
			"--duration", budget.String(), "--workers", strconv.Itoa(peerProducers))
	}}
	return p
}

// peerRiverWork: N units of work already committed → all N executed
// against a no-op provider and recorded completed, timed from the workers'
// start until the N-th completion is in the table. idem: the effect worker
// at Concurrency 128 (its effect_drain configuration); River: one queue of
// MaxWorkers 128, FetchCooldown riverFetchCooldown, its other settings at
// their defaults. Both sides work the same N per round.
func peerRiverWork(e *Env) Pair {
	var (
		d     store.Driver[any]
		l     *effect.Ledger[any]
		rs    string
		n     int
		round atomic.Int64
	)
	size := func(budget time.Duration) int {
		if n == 0 {
			n = max(2000, int(6000*budget.Seconds()))
		}
		return n
	}
	p := Pair{Name: "peer_river_work"}
	p.Setup = func(ctx context.Context) (err error) {
		if d, l, err = e.riverLedger(ctx); err != nil {
			return err
		}
		rs = e.riverSchema()
		return nil
	}
	p.A = Side{Label: "idem", Run: func(ctx context.Context, budget time.Duration) (Sample, error) {
		return workEffects(ctx, d, l, "w"+strconv.FormatInt(round.Add(1), 10), size(budget))
	}}
	p.B = Side{Label: "river", Run: func(ctx context.Context, budget time.Duration) (Sample, error) {
		return e.runPeer(ctx, "--pair", "river_work", "--river-schema", rs, "--tag", e.name("w"),
			"--events", strconv.Itoa(size(budget)), "--workers", strconv.Itoa(drainConcurrency),
			"--fetch-cooldown", riverFetchCooldown.String())
	}}
	return p
}

// workEffects empties the effects table, schedules n effects (untimed, 1,000
// per transaction) and times an effect worker (Concurrency drainConcurrency,
// a no-op performer) from its start until every one is recorded completed.
func workEffects(ctx context.Context, d store.Driver[any], l *effect.Ledger[any], tag string, n int) (Sample, error) {
	table := d.Table("effects")
	if _, err := d.Pool().Exec(ctx, `TRUNCATE `+table); err != nil {
		return Sample{}, err
	}
	for i := 0; i < n; i += 1000 {
		err := store.InTx(ctx, d, func(tx any) error {
			for j := i; j < min(i+1000, n); j++ {
				key := "work:" + tag + ":" + strconv.Itoa(j)
				if _, _, err := l.ScheduleTx(ctx, tx, effect.Effect{Key: key, Kind: riverKind, Payload: payload}); err != nil {
					return err
				}
			}
			return nil
		})
		if err != nil {
			return Sample{}, err
		}
	}
	var calls atomic.Int64
	w, err := effect.NewWorker(l, effect.WorkerConfig[any]{Concurrency: drainConcurrency})
	if err != nil {
		return Sample{}, err
	}
	noop := func(context.Context, string, []byte) ([]byte, error) { calls.Add(1); return nil, nil }
	if err := w.Register(riverKind, noop); err != nil {
		return Sample{}, err
	}
	wctx, stop := context.WithCancel(ctx)
	defer stop()
	stopped := make(chan error, 1)
	start := time.Now()
	go func() { stopped <- w.Run(wctx) }()
	defer func() { stop(); <-stopped }()
	count := `SELECT count(*) FROM ` + table + ` WHERE state = 'completed'`
	tick := time.NewTicker(time.Millisecond)
	defer tick.Stop()
	for {
		select {
		case err := <-stopped:
			stopped <- err
			return Sample{}, fmt.Errorf("effect worker stopped: %v", err)
		case <-ctx.Done():
			return Sample{}, ctx.Err()
		case <-tick.C:
		}
		if calls.Load() < int64(n) {
			continue
		}
		var done int
		if err := d.Pool().QueryRow(ctx, count).Scan(&done); err != nil {
			return Sample{}, err
		}
		if done >= n {
			return Sample{Ops: n, Elapsed: time.Since(start)}, nil
		}
	}
}

// KnownPeers returns the peer libraries Config.Peers may name.
func KnownPeers() []string { return []string{"watermill", "river"} }
