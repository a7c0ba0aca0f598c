// Package driverkit holds what code implementing or wrapping a
// store.Driver shares: [Erase], which turns a store.Driver[TTx] into a
// store.Driver[any], and [RunStmts], the SendBatch of a driver that does not
// pipeline.
package driverkit

import (
	"context"
	"fmt"

	"github.com/idemkit/idem/internal/sqlset"
	"github.com/idemkit/idem/store"
)

// Erase turns a store.Driver[TTx] into a store.Driver[any] (the transaction, a TTx,
// travels as any), forwarding every method and ability, so code written
// once for store.Driver[any] runs on any driver at full speed.
func Erase[TTx any](d store.Driver[TTx]) store.Driver[any] { return erased[TTx]{d} }

type erased[TTx any] struct{ d store.Driver[TTx] }

func (a erased[TTx]) Dialect() store.Dialect      { return a.d.Dialect() }
func (a erased[TTx]) Table(n string) string       { return a.d.Table(n) }
func (a erased[TTx]) Names() store.Names          { return a.d.Names() }
func (a erased[TTx]) Tx(tx any) store.Querier     { return a.d.Tx(tx.(TTx)) }
func (a erased[TTx]) Pool() store.Querier         { return a.d.Pool() }
func (a erased[TTx]) Close() error                { return a.d.Close() }
func (a erased[TTx]) Statements() *sqlset.Set     { return a.d.Statements() }
func (a erased[TTx]) SupportsPipeline() bool      { return a.d.SupportsPipeline() }
func (a erased[TTx]) SupportsListener() bool      { return a.d.SupportsListener() }
func (a erased[TTx]) SupportsAdvisoryLocks() bool { return a.d.SupportsAdvisoryLocks() }

// TranslateError forwards to the driver's store.ErrorTranslator, if any.
func (a erased[TTx]) TranslateError(err error) error {
	if t, ok := a.d.(store.ErrorTranslator); ok {
		return t.TranslateError(err)
	}
	return err
}

func (a erased[TTx]) Begin(ctx context.Context) (any, error) {
	tx, err := a.d.Begin(ctx)
	if err != nil {
		return nil, err
	}
	return tx, nil
}

func (a erased[TTx]) Commit(ctx context.Context, tx any) error {
	return a.d.Commit(ctx, tx.(TTx))
}

func (a erased[TTx]) Rollback(ctx context.Context, tx any) error {
	return a.d.Rollback(ctx, tx.(TTx))
}

func (a erased[TTx]) BeginInsert(ctx context.Context, sql string, args ...any) (any, bool, bool, error) {
	tx, inserted, ok, err := a.d.BeginInsert(ctx, sql, args...)
	if err != nil || !ok || !inserted {
		return nil, inserted, ok, err
	}
	return tx, inserted, ok, nil
}

func (a erased[TTx]) ExecCommit(ctx context.Context, tx any, sql string, args ...any) (bool, error) {
	return a.d.ExecCommit(ctx, tx.(TTx), sql, args...)
}

func (a erased[TTx]) SendBatch(ctx context.Context, q store.Querier, stmts []store.Stmt) error {
	return a.d.SendBatch(ctx, q, stmts)
}

func (a erased[TTx]) BeginReserved(ctx context.Context, stmts []store.Stmt) (any, bool, error) {
	tx, ok, err := a.d.BeginReserved(ctx, stmts)
	if err != nil || !ok {
		return nil, ok, err
	}
	return tx, ok, nil
}

func (a erased[TTx]) EndReserved(ctx context.Context, tx any, commit bool, before, after []store.Stmt) error {
	return a.d.EndReserved(ctx, tx.(TTx), commit, before, after)
}

func (a erased[TTx]) Listen(ctx context.Context, channel string) (store.Listener, error) {
	return a.d.Listen(ctx, channel)
}

// RunStmts runs stmts one by one on q: the SendBatch of a driver that does
// not pipeline.
func RunStmts(ctx context.Context, q store.Querier, stmts []store.Stmt) error {
	for i, s := range stmts {
		if s.Rows == nil {
			n, err := q.Exec(ctx, s.SQL, s.Args...)
			if err != nil {
				return fmt.Errorf("statement %d of batch: %w", i+1, err)
			}
			if s.Affected != nil {
				*s.Affected = n
			}
			continue
		}
		rows, err := q.Query(ctx, s.SQL, s.Args...)
		if err != nil {
			return fmt.Errorf("statement %d of batch: %w", i+1, err)
		}
		err = s.Rows(rows)
		if err == nil {
			err = rows.Err()
		}
		rows.Close()
		if err != nil {
			return fmt.Errorf("statement %d of batch: %w", i+1, err)
		}
	}
	return nil
}
