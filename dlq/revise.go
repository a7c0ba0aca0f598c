package dlq

import (
	"context"
	"errors"
	"fmt"
	"github.com/idemkit/idem/internal/operator"
	"log/slog"

	"github.com/google/uuid"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/broker"
	"github.com/idemkit/idem/internal/checks"
	"github.com/idemkit/idem/internal/fpmatch"
	"github.com/idemkit/idem/store"
)

// HeaderRevisionOf is set on a revision published by [Store.Revise]: the
// message id of the original message the revision replaces.
const HeaderRevisionOf = "Idem-Revision-Of"

// headerCloudEventsID is the CloudEvents id header (binary content mode);
// a revision carries its own id there too, so consumers that identify
// events by it see a new event.
const headerCloudEventsID = "ce-id"

// Revise publishes an edited copy of letter id as a new revision and
// resolves the original, so that the edited and the original copy are never
// both processed: the revision is a new message (a fresh UUIDv7 id, also in
// the ce-id header when the original had one) with the original's subject,
// key and headers, payload replaced by payload, and header
// [HeaderRevisionOf] naming the original message id. The original letter
// is marked discarded by by (who) and can no longer be redriven.
//
// The revision is for the letter's consumer only: it carries
// [broker.HeaderRedriveFor] with the letter's consumer name, so the other
// consumers of the subject, which applied the original already or hold
// their own letter for it, acknowledge it without processing it. In the
// same transaction that resolves the letter, the original message id is
// recorded as consumed in the inbox of the letter's consumer (with the
// original payload's fingerprint and that consumer's inbox retention, see
// Config.InboxRetention): a producer re-sending the original is then a
// duplicate there, and the revision stays the one copy it applies. A
// consumer that derives its inbox identity from the payload
// (consumer.Config.MessageID) processes its own revision under the
// revision's id.
//
// Like [Store.Redrive], the letter is claimed (parked → discarded) in a
// transaction that commits only after pub accepted the revision: if
// publishing fails the letter stays parked and nothing was published that
// could be processed. A letter that is not parked is refused with
// [ErrNotParked]. If the process dies after the broker accepted the
// revision and before the commit, the letter stays parked although its
// revision is out: an operator must then discard it (the revision's id is
// in the log and in the returned message). The revision is recorded in the
// audit log (see [Store.ReviseWith]).
func (s *Store[TTx]) Revise(ctx context.Context, id int64, by string, payload []byte, pub broker.Publisher) (Letter, idem.Message, error) {
	return s.ReviseWith(ctx, id, by, payload, pub, ReviseOptions{})
}

// revise is Revise without the audit log.
func (s *Store[TTx]) revise(ctx context.Context, id int64, by string, payload []byte, pub broker.Publisher) (Letter, idem.Message, error) {
	if pub == nil {
		return Letter{}, idem.Message{}, checks.Optionf("dlq: revise needs a publisher")
	}
	rid, err := uuid.NewV7()
	if err != nil {
		return Letter{}, idem.Message{}, err
	}
	var l Letter
	var rev idem.Message
	err = store.InTx(ctx, s.d, func(tx TTx) error {
		q := s.d.Tx(tx)
		var err error
		if l, err = scanLetter(q.QueryRow(ctx, s.q.Get, id)); errors.Is(err, store.ErrNoRows) {
			return fmt.Errorf("%w: dead letter %d", idem.ErrNotFound, id)
		} else if err != nil {
			return err
		}
		n, err := q.Exec(ctx, s.q.Discard, id, by, store.Micros(s.now()))
		if err != nil {
			return fmt.Errorf("dlq: revise %d: %w", id, err)
		}
		if n == 0 {
			return s.notParked(ctx, id)
		}
		if err := s.consumed(ctx, tx, l); err != nil {
			return fmt.Errorf("dlq: revise %d: %w", id, err)
		}
		rev = revision(l, rid.String(), payload)
		if err := pub.Publish(ctx, rev); err != nil {
			return fmt.Errorf("dlq: revise %d: publish: %w", id, err)
		}
		return nil
	})
	if err != nil {
		return Letter{}, idem.Message{}, err
	}
	s.log.InfoContext(ctx, "dead letter revised", slog.Int64("letter", id), slog.String("by", by),
		slog.String("consumer", l.Consumer), slog.String("message_id", l.MessageID), slog.String("revision_id", rev.ID))
	return l, rev, nil
}

// revision is l's message under the new id with the edited payload.
func revision(l Letter, id string, payload []byte) idem.Message {
	m := l.Message()
	h := make(map[string]string, len(m.Headers)+1)
	for k, v := range m.Headers {
		if k != broker.HeaderRedrive {
			h[k] = v
		}
	}
	if _, ok := h[headerCloudEventsID]; ok {
		h[headerCloudEventsID] = id
	}
	h[HeaderRevisionOf] = l.MessageID
	h[broker.HeaderRedriveFor] = l.Consumer
	m.ID, m.Headers = id, h
	m.Payload = append([]byte{}, payload...)
	return m
}

// consumed records l's original message as consumed in the inbox of l's
// consumer, through the inbox's own insert in the caller's transaction tx,
// kept for the inbox retention that consumer recorded (as its own rows
// are): a record already there (the letter was parked for a fingerprint
// mismatch, or a copy was processed meanwhile) is left as it is.
func (s *Store[TTx]) consumed(ctx context.Context, tx TTx, l Letter) error {
	rec, found, err := operator.RecordedRetention(ctx, operator.InTx(s.d, s.d.Tx(tx)), l.Consumer)
	if err != nil {
		return err
	}
	keep := rec.Retention
	if !found {
		keep = DefaultInboxRetention
	}
	now := s.now()
	fp := fpmatch.Payload(l.Payload)
	if _, err := s.d.Tx(tx).Exec(ctx, s.d.Statements().Inbox.Insert, l.Consumer, l.MessageID, fp[:], store.Micros(now),
		store.Micros(now.Add(keep))); err != nil {
		return fmt.Errorf("record %s/%s in the inbox: %w", l.Consumer, l.MessageID, err)
	}
	return nil
}
