package dlq

import (
	"context"
	"fmt"
	"time"

	"github.com/idemkit/idem/internal/sqlmeta"
	"github.com/idemkit/idem/store"
)

// The dead_letters table is this package's: its states ([Parked],
// [Redriven], [Discarded]), its statements (sqlset.DeadLetters), its counts
// and its expiry. Other packages (retention, idemmetrics, the console, the
// CLI) read and expire it through these functions.

// Installed reports whether d's database has the dead-letter table
// (migration 0005_dead_letters is applied).
func Installed[TTx any](ctx context.Context, d store.Driver[TTx]) (bool, error) {
	return sqlmeta.TableExists(ctx, d, "dead_letters")
}

// Expire deletes up to limit letters an operator resolved (redriven or
// discarded) before horizon and returns how many it deleted. Parked letters
// are never deleted, however old. Call it until it returns fewer than limit.
func Expire[TTx any](ctx context.Context, d store.Driver[TTx], horizon time.Time, limit int) (int64, error) {
	n, err := d.Pool().Exec(ctx, d.Statements().DeadLetters.Expire, store.Micros(horizon), limit)
	if err != nil {
		return n, fmt.Errorf("dlq: expire: %w", err)
	}
	return n, nil
}

// Counts returns the number of letters per stored state ("parked",
// "redriven", "discarded"); states without letters are absent.
func Counts[TTx any](ctx context.Context, d store.Driver[TTx]) (map[string]int64, error) {
	return count(ctx, d, "counts", d.Statements().DeadLetters.Counts)
}

// CountParked returns the number of parked letters per consumer; consumers
// without parked letters are absent. It is the one parked-letter count.
func CountParked[TTx any](ctx context.Context, d store.Driver[TTx]) (map[string]int64, error) {
	return count(ctx, d, "count parked", d.Statements().DeadLetters.CountParked)
}

// CountParkedNoID returns, per consumer, the number of parked letters of
// messages that came without a usable message id (message id
// [NoIDPrefix]…, see [SyntheticID]): set that consumer's
// consumer.Config.MessageID.
func CountParkedNoID[TTx any](ctx context.Context, d store.Driver[TTx]) (map[string]int64, error) {
	return count(ctx, d, "count parked without id", d.Statements().DeadLetters.CountParkedNoID, NoIDPrefix)
}

// count runs a "SELECT group, count(*) … GROUP BY group" statement.
func count[TTx any](ctx context.Context, d store.Driver[TTx], what, stmt string, args ...any) (map[string]int64, error) {
	out, err := store.CountBy(ctx, d.Pool(), stmt, args...)
	if err != nil {
		return nil, fmt.Errorf("dlq: %s: %w", what, err)
	}
	return out, nil
}

// CountClass returns the number of letters, in any state, whose error was
// of class (idem.ErrorClass), e.g. "fingerprint_mismatch" for message ids
// reused with another payload.
func CountClass[TTx any](ctx context.Context, d store.Driver[TTx], class string) (int64, error) {
	var n int64
	if err := d.Pool().QueryRow(ctx, d.Statements().DeadLetters.CountClass, class).Scan(&n); err != nil {
		return 0, fmt.Errorf("dlq: count class %q: %w", class, err)
	}
	return n, nil
}
