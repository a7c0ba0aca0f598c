package store

import (
	"context"

	"github.com/idemkit/idem/internal/sqlset"
)

// Erase turns a Driver[TTx] into a Driver[any] (the transaction, a TTx,
// travels as any), forwarding every method and ability, so code written
// once for Driver[any] runs on any driver at full speed.
func Erase[TTx any](d Driver[TTx]) Driver[any] { return erased[TTx]{d} }

type erased[TTx any] struct{ d Driver[TTx] }

func (a erased[TTx]) Dialect() Dialect            { return a.d.Dialect() }
func (a erased[TTx]) Table(n string) string       { return a.d.Table(n) }
func (a erased[TTx]) Names() Names                { return a.d.Names() }
func (a erased[TTx]) Tx(tx any) Querier           { return a.d.Tx(tx.(TTx)) }
func (a erased[TTx]) Pool() Querier               { return a.d.Pool() }
func (a erased[TTx]) Close() error                { return a.d.Close() }
func (a erased[TTx]) Statements() *sqlset.Set     { return a.d.Statements() }
func (a erased[TTx]) SupportsPipeline() bool      { return a.d.SupportsPipeline() }
func (a erased[TTx]) SupportsListener() bool      { return a.d.SupportsListener() }
func (a erased[TTx]) SupportsAdvisoryLocks() bool { return a.d.SupportsAdvisoryLocks() }

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

func (a erased[TTx]) SendBatch(ctx context.Context, q Querier, stmts []Stmt) error {
	return a.d.SendBatch(ctx, q, stmts)
}

func (a erased[TTx]) BeginReserved(ctx context.Context, stmts []Stmt) (any, bool, error) {
	tx, ok, err := a.d.BeginReserved(ctx, stmts)
	if err != nil || !ok {
		return nil, ok, err
	}
	return tx, ok, nil
}

func (a erased[TTx]) EndReserved(ctx context.Context, tx any, commit bool, before, after []Stmt) error {
	return a.d.EndReserved(ctx, tx.(TTx), commit, before, after)
}

func (a erased[TTx]) Listen(ctx context.Context, channel string) (Listener, error) {
	return a.d.Listen(ctx, channel)
}
