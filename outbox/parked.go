package outbox

import (
	"context"
	"errors"
	"fmt"
	"slices"

	"github.com/idemkit/idem/store"
)

// ParkedEvent is an event the relay gave up on (it exhausted its publish
// attempts), with the last publish error. A parked event is stored as
// failed (lease.Failed). Later events of its ordering key
// wait behind it until it is retried or discarded.
type ParkedEvent struct {
	Event
	// LastError is the last publish error's text, at most 4 KiB (cut on
	// a rune boundary), invalid UTF-8 as U+FFFD, NUL bytes removed.
	LastError string
}

// ErrNotParkedEvent reports a discard of an outbox event that is not (or no
// longer) parked: nothing was done.
var ErrNotParkedEvent = errors.New("outbox: event is not parked")

func scanParked(r interface{ Scan(...any) error }) (ParkedEvent, error) {
	var lastErr string
	e, err := scanEvent(scanAround{r: r, tail: &lastErr})
	return ParkedEvent{Event: e, LastError: lastErr}, err
}

// scanAround puts head before scanEvent's destinations and one more
// (last_error) after them.
type scanAround struct {
	r    interface{ Scan(...any) error }
	head []any
	tail *string
}

func (s scanAround) Scan(dest ...any) error {
	return s.r.Scan(slices.Concat(s.head, dest, []any{s.tail})...)
}

// ListParked returns up to limit parked events (defaults to 100 when ≤ 0),
// grouped by ordering key and in seq order within a key.
func (o *Outbox[TTx]) ListParked(ctx context.Context, limit int) ([]ParkedEvent, error) {
	if limit <= 0 {
		limit = 100
	}
	rows, err := o.d.Pool().Query(ctx, o.q.ListParked, limit)
	if err != nil {
		return nil, fmt.Errorf("outbox: list parked: %w", err)
	}
	defer rows.Close()
	var out []ParkedEvent
	for rows.Next() {
		p, err := scanParked(rows)
		if err != nil {
			return nil, err
		}
		out = append(out, p)
	}
	return out, rows.Err()
}

// BlockedBehind returns how many pending events of ordering key wait behind
// the event seq (they have the same key and a greater seq, so the relay
// holds them back while seq is parked), and the first up to limit of them
// (defaults to 10 when ≤ 0). An empty key blocks nothing.
func (o *Outbox[TTx]) BlockedBehind(ctx context.Context, key string, seq int64, limit int) (int64, []Event, error) {
	if key == "" {
		return 0, nil, nil
	}
	if limit <= 0 {
		limit = 10
	}
	var n int64
	if err := o.d.Pool().QueryRow(ctx, o.q.CountBlocked, key, seq).Scan(&n); err != nil {
		return 0, nil, fmt.Errorf("outbox: blocked behind %d: %w", seq, err)
	}
	rows, err := o.d.Pool().Query(ctx, o.q.BlockedBehind, key, seq, limit)
	if err != nil {
		return 0, nil, fmt.Errorf("outbox: blocked behind %d: %w", seq, err)
	}
	defer rows.Close()
	var out []Event
	for rows.Next() {
		p, err := scanParked(rows)
		if err != nil {
			return 0, nil, err
		}
		out = append(out, p.Event)
	}
	return n, out, rows.Err()
}

// Blocked is what waits behind one parked event: the number of pending
// events of its ordering key after it, and the first of them in seq order.
type Blocked struct {
	Count  int64
	Events []Event
}

// BlockedBehindSeqs is [Outbox.BlockedBehind] for the parked events seqs
// (e.g. a page of [Outbox.ListParked]) in one statement: by parked seq,
// how many pending events of its ordering key wait behind it and the first
// up to limit of them (defaults to 10 when ≤ 0). A seq nothing waits behind
// (its key is empty, or no later event of its key is pending) is absent,
// as is an unknown seq.
func (o *Outbox[TTx]) BlockedBehindSeqs(ctx context.Context, seqs []int64, limit int) (map[int64]Blocked, error) {
	out := map[int64]Blocked{}
	if len(seqs) == 0 {
		return out, nil
	}
	if limit <= 0 {
		limit = 10
	}
	rows, err := o.d.Pool().Query(ctx, o.q.BlockedBehindSeqs, seqsArg(seqs), limit)
	if err != nil {
		return nil, fmt.Errorf("outbox: blocked behind: %w", err)
	}
	defer rows.Close()
	for rows.Next() {
		var seq, n int64
		var lastErr string
		e, err := scanEvent(scanAround{rows, []any{&seq, &n}, &lastErr})
		if err != nil {
			return nil, fmt.Errorf("outbox: blocked behind: %w", err)
		}
		b := out[seq]
		b.Count = n
		b.Events = append(b.Events, e)
		out[seq] = b
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("outbox: blocked behind: %w", err)
	}
	return out, nil
}

// DiscardParked deletes the parked event seq, so that it is never published
// and the later events of its key are released to the relay, and returns
// what was deleted (for the operator's record). An event that is not
// parked is refused with [ErrNotParkedEvent]; an unknown seq too. Like
// [Outbox.RetryParked] it takes the relays' shared lock where the dialect
// has advisory locks (PostgreSQL), so it never interleaves with a relay's
// settle of the same row.
func (o *Outbox[TTx]) DiscardParked(ctx context.Context, seq int64) (ParkedEvent, error) {
	var p ParkedEvent
	err := o.inSharedTx(ctx, func(q store.Querier) error {
		var err error
		p, err = scanParked(q.QueryRow(ctx, o.q.GetParked, seq))
		if errors.Is(err, store.ErrNoRows) {
			return fmt.Errorf("%w: seq %d", ErrNotParkedEvent, seq)
		}
		if err != nil {
			return err
		}
		n, err := q.Exec(ctx, o.q.DiscardParked, seq)
		if err != nil {
			return err
		}
		if n == 0 {
			return fmt.Errorf("%w: seq %d", ErrNotParkedEvent, seq)
		}
		return nil
	})
	if err != nil {
		return ParkedEvent{}, fmt.Errorf("outbox: discard parked: %w", err)
	}
	o.log.InfoContext(ctx, "parked outbox event discarded", "seq", seq, "event_id", p.ID, "type", p.Type)
	return p, nil
}
