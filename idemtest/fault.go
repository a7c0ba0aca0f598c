package idemtest

import (
	"context"
	"database/sql"
	"errors"
	"sync"

	"github.com/idemkit/idem/internal/driverkit"
	"github.com/idemkit/idem/store"
)

// fault is a step of the middleware's transaction at which idemtest makes
// the attempt fail.
type fault int

const (
	noFault fault = iota
	// faultBeforeHandler fails the BEGIN of the request transaction: the
	// key is not claimed and the handler does not run.
	faultBeforeHandler
	// faultAfterHandler crashes the process (a panic) right after the
	// handler returned, its writes done on the still open transaction.
	faultAfterHandler
	// faultBeforeRecord fails the statement that records the response.
	faultBeforeRecord
	// faultAtCommit fails the COMMIT (the transaction is rolled back).
	faultAtCommit
	// faultEffectRecord fails the effect ledger's completion record,
	// after the provider call: the crash between the call and the record.
	faultEffectRecord
)

func (f fault) String() string {
	switch f {
	case faultBeforeHandler:
		return "the transaction failed before the handler (BEGIN failed)"
	case faultAfterHandler:
		return "the process crashed after the handler's writes (before the response was recorded)"
	case faultBeforeRecord:
		return "the transaction failed before the record (the statement storing the response failed)"
	case faultAtCommit:
		return "the transaction failed at commit (rolled back)"
	case faultEffectRecord:
		return "the process crashed between the provider call and the record"
	}
	return "no fault"
}

// errInjected is the error of every injected store fault.
var errInjected = errors.New("idemtest: injected fault")

// crash is the panic value of faultAfterHandler.
type crash struct{}

// injector arms one fault at a time and reports whether it fired. Faults
// are armed only while a single request is in flight.
type injector struct {
	mu    sync.Mutex
	armed fault
	fired bool
}

func (in *injector) arm(f fault) {
	in.mu.Lock()
	in.armed, in.fired = f, false
	in.mu.Unlock()
}

// take reports whether f is armed and, if so, fires it (once).
func (in *injector) take(f fault) bool {
	in.mu.Lock()
	defer in.mu.Unlock()
	if in.armed != f || in.fired {
		return false
	}
	in.fired = true
	return true
}

// disarm disarms and reports whether the armed fault fired.
func (in *injector) disarm() bool {
	in.mu.Lock()
	defer in.mu.Unlock()
	fired := in.fired
	in.armed, in.fired = noFault, false
	return fired
}

// faultDriver wraps the store driver the middleware uses and fails the
// step armed in in. It declares no pipelining, so every driver takes the
// middleware's statement-by-statement path, whose steps it can tell apart
// (BEGIN, the claim, the handler, the record, COMMIT); the user's handler
// sees the same *sql.Tx either way.
type faultDriver struct {
	Store
	in     *injector
	record map[string]bool // the statements that record a response
	effect string          // the statement that records an effect's result
}

func newFaultDriver(d Store, in *injector) *faultDriver {
	k := d.Statements().HTTPKeys
	rec := map[string]bool{}
	for _, s := range []string{k.Complete, k.InsertCompleted} {
		if s != "" {
			rec[s] = true
		}
	}
	return &faultDriver{Store: d, in: in, record: rec, effect: d.Statements().Effects.Complete}
}

var _ store.Driver[*sql.Tx] = (*faultDriver)(nil)

func (d *faultDriver) Begin(ctx context.Context) (*sql.Tx, error) {
	if d.in.take(faultBeforeHandler) {
		return nil, errInjected
	}
	return d.Store.Begin(ctx)
}

func (d *faultDriver) Commit(ctx context.Context, tx *sql.Tx) error {
	if d.in.take(faultAtCommit) {
		_ = d.Store.Rollback(ctx, tx)
		return errInjected
	}
	return d.Store.Commit(ctx, tx)
}

func (d *faultDriver) Tx(tx *sql.Tx) store.Querier {
	return faultQuerier{Querier: d.Store.Tx(tx), d: d}
}

func (d *faultDriver) Pool() store.Querier {
	return faultQuerier{Querier: d.Store.Pool(), d: d}
}

func (d *faultDriver) SupportsPipeline() bool { return false }

func (d *faultDriver) BeginInsert(context.Context, string, ...any) (*sql.Tx, bool, bool, error) {
	return nil, false, false, nil
}

func (d *faultDriver) ExecCommit(context.Context, *sql.Tx, string, ...any) (bool, error) {
	return false, nil
}

func (d *faultDriver) BeginReserved(context.Context, []store.Stmt) (*sql.Tx, bool, error) {
	return nil, false, nil
}

func (d *faultDriver) SendBatch(ctx context.Context, q store.Querier, stmts []store.Stmt) error {
	return driverkit.RunStmts(ctx, q, stmts)
}

// faultQuerier is a Querier that fails the statement recording a response
// when faultBeforeRecord is armed, or an effect's result when
// faultEffectRecord is.
type faultQuerier struct {
	store.Querier
	d *faultDriver
}

func (q faultQuerier) failRecord(sql string) bool {
	return (q.d.record[sql] && q.d.in.take(faultBeforeRecord)) ||
		(sql == q.d.effect && q.d.in.take(faultEffectRecord))
}

func (q faultQuerier) Exec(ctx context.Context, sql string, args ...any) (int64, error) {
	if q.failRecord(sql) {
		return 0, errInjected
	}
	return q.Querier.Exec(ctx, sql, args...)
}

func (q faultQuerier) QueryRow(ctx context.Context, sql string, args ...any) store.Row {
	if q.failRecord(sql) {
		return errRow{}
	}
	return q.Querier.QueryRow(ctx, sql, args...)
}

type errRow struct{}

func (errRow) Scan(...any) error { return errInjected }
