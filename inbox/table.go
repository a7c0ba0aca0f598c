package inbox

import (
	"context"
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
