package operator

import (
	"context"
	"fmt"
	"time"
)

// The dead_letters table (package dlq): its counts and its expiry.

// NoIDPrefix begins the message id of a dead letter whose message came
// without a usable message id (dlq.NoIDPrefix is this).
const NoIDPrefix = "no-id:"

// DLQInstalled reports whether d's database has the dead-letter table
// (migration 0005_dead_letters is applied).
func DLQInstalled(ctx context.Context, d DB) (bool, error) {
	n, err := countOne(ctx, d, "dlq: table dead_letters", d.Statements().SQLMeta.TableExists, d.Table("dead_letters"))
	return n > 0, err
}

// DLQExpire deletes up to limit letters an operator resolved (redriven or
// discarded) before horizon and returns how many it deleted. Parked
// letters are never deleted, however old. Call it until it returns fewer
// than limit.
func DLQExpire(ctx context.Context, d DB, horizon time.Time, limit int) (int64, error) {
	return expire(ctx, d, "dlq: expire", d.Statements().DeadLetters.Expire, horizon, limit)
}

// DLQCounts returns the number of letters per stored state ("parked",
// "redriven", "discarded"); states without letters are absent.
func DLQCounts(ctx context.Context, d DB) (map[string]int64, error) {
	return countBy(ctx, d, "dlq: counts", d.Statements().DeadLetters.Counts)
}

// DLQCountParked returns the number of parked letters per consumer;
// consumers without parked letters are absent. It is the one parked-letter
// count (dlq.Store.CountParked runs it).
func DLQCountParked(ctx context.Context, d DB) (map[string]int64, error) {
	return countBy(ctx, d, "dlq: count parked", d.Statements().DeadLetters.CountParked)
}

// DLQCountParkedNoID returns, per consumer, the number of parked letters
// of messages that came without a usable message id (message id
// [NoIDPrefix]…, see dlq.SyntheticID): set that consumer's
// consumer.Config.MessageID.
func DLQCountParkedNoID(ctx context.Context, d DB) (map[string]int64, error) {
	return countBy(ctx, d, "dlq: count parked without id", d.Statements().DeadLetters.CountParkedNoID, NoIDPrefix)
}

// DLQCountClass returns the number of letters, in any state, whose error
// was of class (idem.ErrorClass), e.g. "fingerprint_mismatch" for message
// ids reused with another payload.
func DLQCountClass(ctx context.Context, d DB, class string) (int64, error) {
	return countOne(ctx, d, fmt.Sprintf("dlq: count class %q", class), d.Statements().DeadLetters.CountClass, class)
}
