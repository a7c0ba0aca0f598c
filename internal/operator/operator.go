// Package operator holds what the operator-facing tools — the idem
// command, the console, package retention, boxoffice and idemmetrics's
// database collector — read and change in idem's tables outside the
// application's own code paths: counts per state, expiry of finished rows,
// the state of one record, and the operator's resolution of held HTTP keys.
//
// Its functions take a [DB], which every store.Driver is, so they are
// written once, without a type parameter, and run on every dialect through
// the driver's statements (sqlset). [InTx] runs them in a transaction.
// The tables' owners (packages dlq, effect, idemhttp, inbox, outbox and
// saga) keep what a service calls.
package operator

import (
	"context"
	"fmt"
	"time"

	"github.com/idemkit/idem/internal/sqlset"
	"github.com/idemkit/idem/store"
)

// DB is what the operator functions use of a store driver: the querier
// they run on and the statements of its dialect. Every store.Driver[TTx]
// is a DB.
type DB interface {
	Pool() store.Querier
	Statements() *sqlset.Set
	// Table returns the qualified name of idem's table name.
	Table(name string) string
}

// InTx returns d running on q instead of d's pool: q is a transaction
// (store.Driver.Tx), so the operator functions given the result read and
// write in that transaction.
func InTx(d DB, q store.Querier) DB { return inTx{DB: d, q: q} }

type inTx struct {
	DB
	q store.Querier
}

func (t inTx) Pool() store.Querier { return t.q }

// CountBy runs a query returning (name, count) rows — a "SELECT state,
// count(*) … GROUP BY state" — and returns the counts by name.
func CountBy(ctx context.Context, q store.Querier, sql string, args ...any) (map[string]int64, error) {
	rows, err := q.Query(ctx, sql, args...)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	out := map[string]int64{}
	for rows.Next() {
		var name string
		var n int64
		if err := rows.Scan(&name, &n); err != nil {
			return nil, err
		}
		out[name] += n
	}
	if err := rows.Err(); err != nil {
		return nil, err
	}
	return out, nil
}

// countBy is CountBy on d's pool, its error naming what was counted.
func countBy(ctx context.Context, d DB, what, sql string, args ...any) (map[string]int64, error) {
	out, err := CountBy(ctx, d.Pool(), sql, args...)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", what, err)
	}
	return out, nil
}

// expire runs an expiry statement ($1 horizon, $2 limit), its error naming
// what was expired.
func expire(ctx context.Context, d DB, what, sql string, horizon time.Time, limit int) (int64, error) {
	n, err := d.Pool().Exec(ctx, sql, store.Micros(horizon), limit)
	if err != nil {
		return n, fmt.Errorf("%s: %w", what, err)
	}
	return n, nil
}

// countOne runs a statement returning one count.
func countOne(ctx context.Context, d DB, what, sql string, args ...any) (int64, error) {
	var n int64
	if err := d.Pool().QueryRow(ctx, sql, args...).Scan(&n); err != nil {
		return 0, fmt.Errorf("%s: %w", what, err)
	}
	return n, nil
}
