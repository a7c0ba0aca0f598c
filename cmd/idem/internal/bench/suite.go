package bench

import (
	"context"
	"database/sql"
	"slices"

	"github.com/idemkit/idem/internal/driverkit"
	"github.com/idemkit/idem/store"
)

// Pairs returns the pairs this run measures, in order: the store-level
// pairs on SQLite (and PostgreSQL when configured), then the HTTP and
// broker pairs on the run's main store (PostgreSQL when configured, else
// SQLite), then the MySQL pairs when configured, then the peer pairs.
func (e *Env) Pairs() []Pair {
	var ps []Pair
	for _, w := range []int{1, 8} {
		ps = append(ps, inboxVsPlain(e, e.sqlite, "sqlite", w))
		if e.hasPostgres() {
			ps = append(ps, inboxVsPlain(e, e.pg, "postgres", w))
		}
	}
	for _, bh := range []bool{false, true} {
		ps = append(ps, inboxBatchVsSingle(e, e.sqlite, "sqlite", bh, 1))
		if e.hasPostgres() {
			ps = append(ps, inboxBatchVsSingle(e, e.pg, "postgres", bh, 1))
		}
	}
	if e.hasPostgres() {
		ps = append(ps, httpPairs(e, e.pg, "postgres", httpClients)...)
		ns := func(ctx context.Context) (store.Driver[any], error) {
			d, err := e.pgxNS(ctx)
			if err != nil {
				return nil, err
			}
			return driverkit.Erase(d), nil // the pgx driver, its abilities forwarded
		}
		ps = append(ps, outboxRelay(e, ns, "postgres"), outboxRelayDeleteVsMark(e, ns, "postgres"), pipeline(e, ns, "postgres"))
		ps = append(ps, effectDrain(e, "postgres"))
		ps = append(ps, inboxPartitionedVsPlain(e), outboxPartitionedVsPlain(e), outboxRelayPartitionedVsPlain(e))
		if e.walLogical {
			ps = append(ps, outboxRelayLogical(e))
		}
		if e.cfg.RetentionRows > 0 {
			ps = append(ps, retentionDropVsDelete(e, e.cfg.RetentionRows))
		}
	} else {
		ps = append(ps, httpPairs(e, e.sqlite, "sqlite", httpClients)...)
		ns := func(ctx context.Context) (store.Driver[*sql.Tx], error) { return e.sqliteNS(ctx) }
		ps = append(ps, outboxRelay(e, ns, "sqlite"), outboxRelayDeleteVsMark(e, ns, "sqlite"), pipeline(e, ns, "sqlite"))
	}
	if e.hasMySQL() {
		ps = append(ps, mysqlPairs(e)...)
	}
	if p, ok := e.proxyPair(); ok {
		ps = append(ps, p)
	}
	if slices.Contains(e.cfg.Peers, "watermill") {
		ps = append(ps, peerProduce(e), peerConsume(e))
	}
	if slices.Contains(e.cfg.Peers, "river") {
		ps = append(ps, peerRiverSchedule(e), peerRiverWork(e))
	}
	return ps
}
