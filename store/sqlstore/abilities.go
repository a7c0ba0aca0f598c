package sqlstore

import (
	"context"
	"database/sql"

	"github.com/idemkit/idem/internal/driverkit"
	"github.com/idemkit/idem/internal/sqlset"
	"github.com/idemkit/idem/store"
)

// Statements returns idem's statements in the driver's dialect.
func (d *driver) Statements() *sqlset.Set { return d.stmts }

// SupportsPipeline is false: database/sql runs one statement per round
// trip.
func (d *driver) SupportsPipeline() bool { return false }

// BeginInsert is not available on database/sql: ok is false and nothing is
// done.
func (d *driver) BeginInsert(context.Context, string, ...any) (*sql.Tx, bool, bool, error) {
	return nil, false, false, nil
}

// ExecCommit is not available on database/sql: ok is false and nothing is
// done.
func (d *driver) ExecCommit(context.Context, *sql.Tx, string, ...any) (bool, error) {
	return false, nil
}

// BeginReserved is not available on database/sql: ok is false and
// nothing is done.
func (d *driver) BeginReserved(context.Context, []store.Stmt) (*sql.Tx, bool, error) {
	return nil, false, nil
}

// EndReserved returns store.ErrNotSupported: there is no BeginReserved.
func (d *driver) EndReserved(context.Context, *sql.Tx, bool, []store.Stmt, []store.Stmt) error {
	return store.ErrNotSupported
}

// SendBatch runs stmts one by one on q.
func (d *driver) SendBatch(ctx context.Context, q store.Querier, stmts []store.Stmt) error {
	return driverkit.RunStmts(ctx, q, stmts)
}

// SupportsListener is false: database/sql cannot LISTEN.
func (d *driver) SupportsListener() bool { return false }

// Listen returns store.ErrNotSupported.
func (d *driver) Listen(context.Context, string) (store.Listener, error) {
	return nil, store.ErrNotSupported
}

// SupportsAdvisoryLocks is true on PostgreSQL.
func (d *driver) SupportsAdvisoryLocks() bool { return d.dialect == store.Postgres }
