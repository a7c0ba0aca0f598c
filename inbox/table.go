package inbox

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"time"

	"github.com/idemkit/idem/store"
)

// Expire deletes up to limit inbox records whose replay horizon passed
// before horizon (expires_at < horizon, set from the consumer's retention
// when the message was received) and returns the number deleted. The
// retention GC calls it in a loop until it deletes fewer than limit.
func Expire[TTx any](ctx context.Context, d store.Driver[TTx], horizon time.Time, limit int) (int64, error) {
	if limit <= 0 {
		return 0, fmt.Errorf("inbox: expire: limit %d must be positive", limit)
	}
	n, err := d.Pool().Exec(ctx, d.Statements().Inbox.Expire, store.Micros(horizon), limit)
	if err != nil {
		return n, fmt.Errorf("inbox: expire: %w", err)
	}
	return n, nil
}

// ExpireKeeping is Expire sparing, for each consumer in keep, the records
// it received at or after keep[consumer] (the retention GC's
// Config.InboxMinAge: a consumer's retention lengthened after its rows
// were written). An empty keep is Expire.
func ExpireKeeping[TTx any](ctx context.Context, d store.Driver[TTx], horizon time.Time, limit int, keep map[string]time.Time) (int64, error) {
	if len(keep) == 0 {
		return Expire(ctx, d, horizon, limit)
	}
	if limit <= 0 {
		return 0, fmt.Errorf("inbox: expire: limit %d must be positive", limit)
	}
	args := make([]any, 0, 2+2*len(keep))
	args = append(args, store.Micros(horizon))
	for _, c := range slices.Sorted(maps.Keys(keep)) { // one statement text per set of consumers
		args = append(args, c, store.Micros(keep[c]))
	}
	n, err := d.Pool().Exec(ctx, d.Statements().Inbox.ExpireKeeping(len(keep)), append(args, limit)...)
	if err != nil {
		return n, fmt.Errorf("inbox: expire: %w", err)
	}
	return n, nil
}

// Counts returns the number of inbox records per stored state
// (lease.InProgress, lease.Completed, lease.Failed); a state without
// records is absent.
func Counts[TTx any](ctx context.Context, d store.Driver[TTx]) (map[string]int64, error) {
	out, err := store.CountBy(ctx, d.Pool(), d.Statements().Inbox.CountByState)
	if err != nil {
		return nil, fmt.Errorf("inbox: counts: %w", err)
	}
	return out, nil
}

// CountsByConsumer returns the number of inbox records per consumer.
func CountsByConsumer[TTx any](ctx context.Context, d store.Driver[TTx]) (map[string]int64, error) {
	out, err := store.CountBy(ctx, d.Pool(), d.Statements().Inbox.CountByConsumer)
	if err != nil {
		return nil, fmt.Errorf("inbox: counts by consumer: %w", err)
	}
	return out, nil
}

// StateOf returns the stored state of the inbox record of (consumer,
// messageID): lease.InProgress ("in_progress"), lease.Completed or
// lease.Failed. found is false when there is no record (never received,
// or expired and collected).
func StateOf[TTx any](ctx context.Context, d store.Driver[TTx], consumer, messageID string) (state string, found bool, err error) {
	state, _, found, err = lookup(ctx, d.Pool(), d, consumer, messageID)
	return state, found, err
}

// ExpiryOf returns when the inbox record of (consumer, messageID) passes
// its replay horizon (after which [Expire] may delete it); the zero time
// when it is kept forever. found is false when there is no record.
func ExpiryOf[TTx any](ctx context.Context, d store.Driver[TTx], consumer, messageID string) (expiresAt time.Time, found bool, err error) {
	_, expiresAt, found, err = lookup(ctx, d.Pool(), d, consumer, messageID)
	return expiresAt, found, err
}

// ExpiryOfTx is [ExpiryOf] in the caller's transaction tx (a dead-letter
// redrive checks the record in the transaction that marks the letter
// redriven).
func ExpiryOfTx[TTx any](ctx context.Context, d store.Driver[TTx], tx TTx, consumer, messageID string) (expiresAt time.Time, found bool, err error) {
	_, expiresAt, found, err = lookup(ctx, d.Tx(tx), d, consumer, messageID)
	return expiresAt, found, err
}

func lookup[TTx any](ctx context.Context, q store.Querier, d store.Driver[TTx], consumer, messageID string) (state string, expiresAt time.Time, found bool, err error) {
	var exp int64
	err = q.QueryRow(ctx, d.Statements().Inbox.Lookup, consumer, messageID).Scan(&state, &exp)
	if errors.Is(err, store.ErrNoRows) {
		return "", time.Time{}, false, nil
	}
	if err != nil {
		return "", time.Time{}, false, fmt.Errorf("inbox: record (%q, %q): %w", consumer, messageID, err)
	}
	return state, store.FromMicros(exp), true, nil
}
