package operator

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/idemkit/idem/store"
)

// The outbox table (package outbox): counts, expiry, the state of one
// event and the backlog.

// OutboxExpire deletes up to limit published events (stored as completed)
// whose published_at is before horizon, oldest first, and returns how many
// it deleted (limit defaults to 1000 when ≤ 0). Pending and parked events
// are never deleted; call it again while it returns limit. It is the
// outbox's retention step (package retention calls it with now -
// OutboxRetention; outbox.Outbox.Prune loops on it).
func OutboxExpire(ctx context.Context, d DB, horizon time.Time, limit int) (int64, error) {
	if limit <= 0 {
		limit = 1000
	}
	return expire(ctx, d, "outbox: expire", d.Statements().Outbox.Expire, horizon, limit)
}

// OutboxCounts returns the number of outbox events per stored state:
// lease.Pending ("pending"), lease.Completed ("completed": published) and
// lease.Failed ("failed": parked). States without events are absent.
func OutboxCounts(ctx context.Context, d DB) (map[string]int64, error) {
	return countBy(ctx, d, "outbox: counts", d.Statements().Outbox.Counts)
}

// OutboxStateOf returns the stored state of the event eventID of source:
// lease.Pending ("pending", claimed or not), lease.Completed ("completed":
// published) or lease.Failed ("failed": parked). found is false when there
// is no such event: never enqueued, expired after its publication, or
// deleted on its publication (outbox.RelayConfig.DeletePublished).
func OutboxStateOf(ctx context.Context, d DB, source, eventID string) (state string, found bool, err error) {
	err = d.Pool().QueryRow(ctx, d.Statements().Outbox.State, source, eventID).Scan(&state)
	if errors.Is(err, store.ErrNoRows) {
		return "", false, nil
	}
	if err != nil {
		return "", false, fmt.Errorf("outbox: state of %s/%s: %w", source, eventID, err)
	}
	return state, true, nil
}

// Backlog is the outbox's backlog, as [OutboxBacklog] measures it.
type Backlog struct {
	// Pending is the number of events not yet published (claimed ones
	// included).
	Pending int64
	// Oldest is the age of the oldest pending event (by seq) at the time
	// given to OutboxBacklog: the outbox lag. 0 when nothing is pending.
	Oldest time.Duration
	// OldestAt is the created_at of the oldest pending event; zero when
	// nothing is pending.
	OldestAt time.Time
}

// OutboxBacklog measures the outbox lag at now: how many events are
// pending and how old the oldest of them is. It is the one outbox-lag
// computation (metrics, console, stats and outbox.Outbox.Stats all use
// it); one statement, one snapshot.
func OutboxBacklog(ctx context.Context, d DB, now time.Time) (Backlog, error) {
	var b Backlog
	var created int64
	if err := d.Pool().QueryRow(ctx, d.Statements().Outbox.Backlog).Scan(&b.Pending, &created); err != nil {
		return Backlog{}, fmt.Errorf("outbox: backlog: %w", err)
	}
	if b.Pending > 0 {
		b.OldestAt = store.FromMicros(created)
		b.Oldest = max(0, now.Sub(b.OldestAt))
	}
	return b, nil
}
