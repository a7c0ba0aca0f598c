package operator

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"time"

	"github.com/idemkit/idem/store"
)

// The inbox and consumer_horizons tables (package inbox): counts, expiry,
// the state of one record and the retention a consumer recorded.

// InboxExpire deletes up to limit inbox records whose replay horizon
// passed before horizon (expires_at < horizon, set from the consumer's
// retention when the message was received) and returns the number
// deleted; limit must be positive. It spares, for each consumer in keep,
// the records it received at or after keep[consumer] (the retention GC's
// Config.InboxMinAge: a consumer's retention lengthened after its rows
// were written); keep may be nil. The retention GC calls it in a loop
// until it deletes fewer than limit.
func InboxExpire(ctx context.Context, d DB, horizon time.Time, limit int, keep map[string]time.Time) (int64, error) {
	if limit <= 0 {
		return 0, fmt.Errorf("inbox: expire: limit %d must be positive", limit)
	}
	if len(keep) == 0 {
		return expire(ctx, d, "inbox: expire", d.Statements().Inbox.Expire, horizon, limit)
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

// InboxCounts returns the number of inbox records per stored state
// (lease.InProgress, lease.Completed, lease.Failed); a state without
// records is absent.
func InboxCounts(ctx context.Context, d DB) (map[string]int64, error) {
	return countBy(ctx, d, "inbox: counts", d.Statements().Inbox.CountByState)
}

// InboxCountsByConsumer returns the number of inbox records per consumer.
func InboxCountsByConsumer(ctx context.Context, d DB) (map[string]int64, error) {
	return countBy(ctx, d, "inbox: counts by consumer", d.Statements().Inbox.CountByConsumer)
}

// InboxRecord is the stored state of one inbox record, as [InboxRecordOf]
// reads it.
type InboxRecord struct {
	// State is lease.InProgress ("in_progress"), lease.Completed or
	// lease.Failed.
	State string
	// ExpiresAt is when the record passes its replay horizon (after which
	// [InboxExpire] may delete it); zero when it is kept forever.
	ExpiresAt time.Time
}

// InboxRecordOf reads the inbox record of (consumer, messageID); found is
// false when there is none (never received, or expired and collected). A
// dead-letter redrive reads it in the transaction that marks the letter
// redriven ([InTx]).
func InboxRecordOf(ctx context.Context, d DB, consumer, messageID string) (r InboxRecord, found bool, err error) {
	var exp int64
	err = d.Pool().QueryRow(ctx, d.Statements().Inbox.Lookup, consumer, messageID).Scan(&r.State, &exp)
	if errors.Is(err, store.ErrNoRows) {
		return InboxRecord{}, false, nil
	}
	if err != nil {
		return InboxRecord{}, false, fmt.Errorf("inbox: record (%q, %q): %w", consumer, messageID, err)
	}
	r.ExpiresAt = store.FromMicros(exp)
	return r, true, nil
}

// Recorded is the inbox retention a consumer recorded with
// inbox.Inbox.RecordRetention, and when.
type Recorded struct {
	Retention  time.Duration
	RecordedAt time.Time
	// PriorRetention, when positive and shorter than Retention, is the
	// shorter retention in force before Retention was recorded at
	// WidenedAt (migration 0017_retention_widening): records written
	// until then expire after it.
	PriorRetention time.Duration
	WidenedAt      time.Time
}

// RetentionFor returns the retention a letter whose message first failed
// at firstFailed is judged by: PriorRetention when it is shorter and the
// letter first failed before WidenedAt + PriorRetention (its message may
// have been recorded under the shorter one, by this consumer or by an
// instance still running the old configuration), else Retention.
func (r Recorded) RetentionFor(firstFailed time.Time) time.Duration {
	if r.PriorRetention > 0 && r.PriorRetention < r.Retention && firstFailed.Before(r.WidenedAt.Add(r.PriorRetention)) {
		return r.PriorRetention
	}
	return r.Retention
}

// RecordedRetention returns the inbox retention consumer recorded last
// (inbox.Inbox.RecordRetention); found is false when it recorded none (it
// has not started since migration 0015_consumer_horizons). [InTx] reads
// it in a transaction.
func RecordedRetention(ctx context.Context, d DB, consumer string) (r Recorded, found bool, err error) {
	var ret, at, prior, widened int64
	err = d.Pool().QueryRow(ctx, d.Statements().Horizons.Get, consumer).Scan(&ret, &at, &prior, &widened)
	if errors.Is(err, store.ErrNoRows) {
		return Recorded{}, false, nil
	}
	if err != nil {
		return Recorded{}, false, fmt.Errorf("inbox: recorded retention of consumer %q: %w", consumer, err)
	}
	return Recorded{Retention: time.Duration(ret) * time.Microsecond, RecordedAt: store.FromMicros(at),
		PriorRetention: time.Duration(prior) * time.Microsecond, WidenedAt: store.FromMicros(widened)}, true, nil
}
