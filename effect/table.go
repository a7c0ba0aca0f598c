package effect

import (
	"context"
	"errors"
	"fmt"

	"github.com/idemkit/idem/internal/lease"
	"github.com/idemkit/idem/store"
)

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
