package effect

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/idemkit/idem/internal/lease"
	"github.com/idemkit/idem/store"
)

// Expire deletes up to limit completed effects whose expires_at (set from
// [Config.Retention] when they completed; 0 keeps them) passed before
// horizon, and returns the number deleted. Pending, in_progress (held
// included) and failed effects are never deleted. The retention GC calls it
// in batches.
func Expire[TTx any](ctx context.Context, d store.Driver[TTx], horizon time.Time, limit int) (int64, error) {
	if limit <= 0 {
		return 0, nil
	}
	n, err := d.Pool().Exec(ctx, d.Statements().Effects.Expire, store.Micros(horizon), limit)
	if err != nil {
		return 0, fmt.Errorf("effect: expire: %w", err)
	}
	return n, nil
}

// Counts returns the number of effects per stored state ("pending",
// "in_progress", "completed", "failed"); a state without effects is
// absent. Held effects ([Effect.HeldAt]) are stored in_progress and counted
// there; [CountHeld] counts them apart.
func Counts[TTx any](ctx context.Context, d store.Driver[TTx]) (map[string]int64, error) {
	return countBy(ctx, d, d.Statements().Effects.CountByState, "counts")
}

// CountHeld returns the number of effects held for reconciliation (see
// [WithKeyLifetime]) per kind; a kind without held effects is absent.
func CountHeld[TTx any](ctx context.Context, d store.Driver[TTx]) (map[string]int64, error) {
	return countBy(ctx, d, d.Statements().Effects.CountHeld, "count held")
}

// countBy runs a (name, count) statement of the ledger's (see
// [store.CountBy]), its error naming what was counted.
func countBy[TTx any](ctx context.Context, d store.Driver[TTx], sql, what string) (map[string]int64, error) {
	out, err := store.CountBy(ctx, d.Pool(), sql)
	if err != nil {
		return nil, fmt.Errorf("effect: %s: %w", what, err)
	}
	return out, nil
}

// CountAbandoned returns the number of in_progress effects whose lease
// ended by now: their worker crashed or hung (held effects, which have no
// lease, are included).
func CountAbandoned[TTx any](ctx context.Context, d store.Driver[TTx], now time.Time) (int64, error) {
	var n int64
	if err := d.Pool().QueryRow(ctx, d.Statements().Effects.CountAbandoned, store.Micros(now)).Scan(&n); err != nil {
		return 0, fmt.Errorf("effect: count abandoned: %w", err)
	}
	return n, nil
}

// CountsByKind returns the number of effects per kind, every state
// counted; a kind without effects is absent. Inline effects
// ([Ledger.Do]) have the empty kind.
func CountsByKind[TTx any](ctx context.Context, d store.Driver[TTx]) (map[string]int64, error) {
	return countBy(ctx, d, d.Statements().Effects.CountByKind, "counts by kind")
}

// LockTx reads the state of effect key and locks its row in the caller's
// transaction tx until tx ends: the lock the ledger takes to record a
// claimed effect's result or to take it over, and [FenceTx] takes too, so
// whoever holds it goes first and the other waits for its commit
// (PostgreSQL row lock; on SQLite the write transaction is serial already).
// found is false, with no lock taken, when the effect does not exist.
func LockTx[TTx any](ctx context.Context, d store.Driver[TTx], tx TTx, key string) (state State, found bool, err error) {
	var s string
	err = d.Tx(tx).QueryRow(ctx, d.Statements().Effects.Lock, key).Scan(&s)
	if errors.Is(err, store.ErrNoRows) {
		return "", false, nil
	}
	if err != nil {
		return "", false, fmt.Errorf("effect: lock %q: %w", key, err)
	}
	return State(s), true, nil
}

// FenceTx proves, in the caller's transaction tx, that effect key is still
// in progress under token (the claim of the worker performing it), and
// locks its row until tx ends like [LockTx]. It returns an error wrapping
// [idem.ErrLeaseLost] when another claimer took the effect over or it
// settled: a zombie's local change in tx then rolls back.
func FenceTx[TTx any](ctx context.Context, d store.Driver[TTx], tx TTx, key string, token int64) error {
	n, err := d.Tx(tx).Exec(ctx, d.Statements().Effects.Fence, key, token)
	return lease.Fence(n, err, fmt.Sprintf("effect: fence %q", key), token)
}

// Token returns the fencing token of effect key while it is in progress
// (claimed); found is false when the effect does not exist or is not in
// progress.
func Token[TTx any](ctx context.Context, d store.Driver[TTx], key string) (token int64, found bool, err error) {
	err = d.Pool().QueryRow(ctx, d.Statements().Effects.Token, key).Scan(&token)
	if errors.Is(err, store.ErrNoRows) {
		return 0, false, nil
	}
	if err != nil {
		return 0, false, fmt.Errorf("effect: token of %q: %w", key, err)
	}
	return token, true, nil
}
