package dlq

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"strings"
	"time"

	"github.com/google/uuid"
	"github.com/idemkit/idem/internal/lease"
	"github.com/idemkit/idem/internal/operator"

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
// both processed: the revision is a new message (its id derived from the
// letter, the same for every revision of one letter, and also in the ce-id
// header when the original had one) with the original's subject, key and
// headers, payload replaced by payload, and header [HeaderRevisionOf]
// naming the original message id. The original letter is marked discarded
// by by (who) and can no longer be redriven.
//
// The revision is for the letter's consumer only: it carries
// [broker.HeaderRedriveFor] with the letter's consumer name, so the other
// consumers of the subject, which applied the original already or hold
// their own letter for it, acknowledge it without processing it. Before
// the revision is published, the original message id is recorded as
// consumed in the inbox of the letter's consumer (with the
// original payload's fingerprint and that consumer's inbox retention, see
// Config.InboxRetention): a producer re-sending the original is then a
// duplicate there, and the revision stays the one copy it applies. A
// consumer that derives its inbox identity from the payload
// (consumer.Config.MessageID) processes its own revision under the
// revision's id.
//
// A revision is a new message id, which no inbox recognises, so Revise
// refuses, with a [RefusedError] matching [ErrRedriveRefused], a letter
// whose original its consumer may have applied: when that consumer's inbox
// holds the message id as processed or in progress (a copy was processed
// meanwhile, another letter of the id was revised, or the letter was parked
// for a fingerprint mismatch: the id was processed with another payload;
// [RefusedOriginalProcessed]), or when it holds no record and the letter is
// older than the consumer's inbox retention (its record may have been
// collected; [RefusedTooOld]). [Store.ReviseWith] with Force and a Reason
// revises anyway. An inbox retention given to the store that is longer
// than the consumer's own is refused even with Force, as for a redrive
// ([ErrRetentionOverstated]).
//
// The revision (Letter.RevisionID, RevisionPayload) is recorded with the
// letter and the check above made, in a transaction committed before the
// revision is published; once the broker accepted it, the letter is
// resolved (discarded by by). If publishing fails (or times out: the
// broker may have taken it) or the letter is not resolved after it (the
// database or the process is lost), the letter stays parked with its
// revision recorded: it is not redriven ([ErrRevisionPending]; the
// original beside a revision that is out would be a second effect).
// Revising it again publishes the same revision id, which the consumer's
// inbox recognises if the first one is out; the inbox record of the
// original the first revision wrote refuses nothing then, but a record a
// later copy wrote does (see the check above), and so does a payload other
// than the recorded one ([ErrRevisionPending]; with Force and a Reason it
// is published under the same id: should the recorded one be out, the
// consumer parks the second as a fingerprint mismatch, or the broker drops
// it as a duplicate inside its window, and Revise then resolves the letter
// with the recorded payload and returns [ErrDroppedAsDuplicate]). Discarding it is
// the other way out; the original stays recorded as consumed. The
// resolution does not follow ctx's cancellation (a closed browser tab must
// not leave a published revision unresolved). A letter that is not parked
// is refused with [ErrNotParked]. The revision is recorded in the audit
// log (see [Store.ReviseWith]).
func (s *Store[TTx]) Revise(ctx context.Context, id int64, by string, payload []byte, pub broker.Publisher) (Letter, idem.Message, error) {
	return s.ReviseWith(ctx, id, by, payload, pub, ReviseOptions{})
}

// reviseResolveTimeout bounds the statement that resolves a letter once
// its revision is published, which no longer follows the caller's
// cancellation; revisePublishTimeout bounds the publish.
const (
	reviseResolveTimeout = time.Minute
	revisePublishTimeout = 30 * time.Second
)

// revisionSpace is the UUID namespace of revision ids (revisionID).
var revisionSpace = uuid.MustParse("5b0c0c9e-3f0e-5a8e-9d1a-7f7e2c6b4a10")

// revisionID is the message id of every revision of letter l: a name-based
// UUID (version 5) of the letter's consumer, message id, letter id and
// first failure, so a revision published again (the letter was not
// resolved after the first publish) is a duplicate of the first one in the
// consumer's inbox.
func revisionID(l Letter) string {
	name := l.Consumer + "\x00" + l.MessageID + "\x00" + strconv.FormatInt(l.ID, 10) + "\x00" +
		strconv.FormatInt(store.Micros(l.FirstFailedAt), 10)
	return uuid.NewSHA1(revisionSpace, []byte(name)).String()
}

// revised is what revise did: forced when opt.Force overrode a refusal,
// again when it published a revision recorded earlier, changed when that
// revision's payload was another.
type revised struct{ forced, again, changed bool }

// revise is ReviseWith without the audit log.
func (s *Store[TTx]) revise(ctx context.Context, id int64, by string, payload []byte, pub broker.Publisher, opt ReviseOptions) (l Letter, rev idem.Message, did revised, err error) {
	if opt.Force && strings.TrimSpace(opt.Reason) == "" {
		return Letter{}, idem.Message{}, did, checks.Optionf("dlq: a forced revision needs a reason")
	}
	if pub == nil {
		return Letter{}, idem.Message{}, did, checks.Optionf("dlq: revise needs a publisher")
	}
	// First the revision is recorded with the letter, the check made and
	// the original recorded as consumed: after this commit the letter is
	// not redriven, whatever happens to the publish.
	var first []byte // the payload of a revision recorded earlier
	err = store.InTx(ctx, s.d, func(tx TTx) error {
		q := s.d.Tx(tx)
		var err error
		if l, err = scanLetter(q.QueryRow(ctx, s.q.GetLocked, id)); errors.Is(err, store.ErrNoRows) {
			return fmt.Errorf("%w: dead letter %d", idem.ErrNotFound, id)
		} else if err != nil {
			return err
		}
		if l.State != Parked {
			return unclaimable(l)
		}
		// A letter revised before keeps its revision id (it may be out).
		did = revised{again: l.RevisionID != ""}
		refused := func(err error) error {
			if !opt.Force || !(errors.Is(err, ErrRedriveRefused) || errors.Is(err, ErrRevisionPending)) {
				return err
			}
			did.forced = true
			s.log.WarnContext(ctx, "dead letter revised past a refusal", slog.Int64("letter", id),
				slog.String("by", by), slog.String("reason", opt.Reason), slog.String("refusal", err.Error()))
			return nil
		}
		// Another payload is what the consumer's fingerprint tells apart
		// (canonical JSON: the console re-posts the payload indented).
		first = l.RevisionPayload
		if did.again && fpmatch.Payload(payload) != fpmatch.Payload(first) {
			did.changed = true
			if err := refused(fmt.Errorf("%w: dead letter %d has revision %s with another payload, which may be out: "+
				"publish it again with that payload, or force with a reason (if the first is out, the consumer "+
				"parks the second as a fingerprint mismatch)", ErrRevisionPending, id, l.RevisionID)); err != nil {
				return err
			}
		}
		record, err := s.reviseHorizon(ctx, tx, l)
		if err := refused(err); err != nil {
			return err
		}
		if !did.again {
			l.RevisionID = revisionID(l)
		}
		if _, err := q.Exec(ctx, s.q.SetRevision, id, l.RevisionID, payload, record); err != nil {
			return fmt.Errorf("dlq: revise %d: %w", id, err)
		}
		l.RevisionPayload, l.revisionRecord = append([]byte{}, payload...), record
		return nil
	})
	if err != nil {
		return Letter{}, idem.Message{}, revised{}, err
	}
	rev = revision(l, payload)
	dup, err := s.publishRevision(ctx, pub, rev)
	if err != nil {
		return Letter{}, idem.Message{}, revised{}, fmt.Errorf("dlq: revise %d: publish revision %s: %w (it may be out: the letter keeps it, "+
			"and is revised again or discarded, not redriven)", id, rev.ID, err)
	}
	// The revision is out: the letter is resolved even if the caller has
	// gone away meanwhile.
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), reviseResolveTimeout)
	defer cancel()
	if dup && did.changed {
		return l, rev, did, s.keepFirstRevision(rctx, l, by, first)
	}
	now := s.now()
	n, err := s.d.Pool().Exec(rctx, s.q.ResolveRevision, id, by, store.Micros(now), rev.ID)
	if err != nil {
		return Letter{}, idem.Message{}, revised{}, fmt.Errorf("dlq: revise %d: revision %s published, letter not resolved: %w "+
			"(revise it again, which publishes the same revision, or discard it)", id, rev.ID, err)
	}
	if n == 0 { // discarded meanwhile by someone else: the revision is out all the same
		s.log.WarnContext(ctx, "dead letter resolved by someone else while its revision was published", slog.Int64("letter", id),
			slog.String("revision_id", rev.ID))
		if got, err := s.Get(rctx, id); err == nil {
			l = got
		}
	} else {
		l.State, l.ResolvedBy, l.ResolvedAt = Discarded, by, store.FromMicros(store.Micros(now))
	}
	s.log.InfoContext(ctx, "dead letter revised", slog.Int64("letter", id), slog.String("by", by),
		slog.String("consumer", l.Consumer), slog.String("message_id", l.MessageID), slog.String("revision_id", rev.ID))
	return l, rev, did, nil
}

// keepFirstRevision resolves l, whose revision the broker dropped as a
// duplicate of an earlier publish under its id with another payload:
// that one is out, so the letter keeps the payload recorded before this
// revise (first) and is resolved with it, in one transaction. The error
// wraps ErrDroppedAsDuplicate: the edited payload was not published.
func (s *Store[TTx]) keepFirstRevision(ctx context.Context, l Letter, by string, first []byte) error {
	var n int64
	err := store.InTx(ctx, s.d, func(tx TTx) error {
		q := s.d.Tx(tx)
		var err error
		if n, err = q.Exec(ctx, s.q.SetRevision, l.ID, l.RevisionID, first, l.revisionRecord); err != nil || n == 0 {
			return err
		}
		n, err = q.Exec(ctx, s.q.ResolveRevision, l.ID, by, store.Micros(s.now()), l.RevisionID)
		return err
	})
	if err != nil {
		return fmt.Errorf("dlq: revise %d: the broker dropped revision %s as a duplicate of an earlier publish with another "+
			"payload, and the letter could not be resolved with that one: %w (%w)", l.ID, l.RevisionID, err, ErrDroppedAsDuplicate)
	}
	resolved := "the letter is resolved with the payload recorded before"
	if n == 0 {
		resolved = "the letter was resolved meanwhile by someone else"
	}
	return fmt.Errorf("%w: dead letter %d: revision %s was out already with the payload recorded before this one; %s, "+
		"and the edited payload was not published", ErrDroppedAsDuplicate, l.ID, l.RevisionID, resolved)
}

// publishRevision publishes rev through pub within revisePublishTimeout.
// dup reports a revision the broker dropped as a duplicate (JetStream's
// window): it was published before, and that copy is out.
func (s *Store[TTx]) publishRevision(ctx context.Context, pub broker.Publisher, rev idem.Message) (dup bool, err error) {
	ctx, cancel := context.WithTimeout(ctx, revisePublishTimeout)
	defer cancel()
	rp, ok := pub.(broker.ResultPublisher)
	if !ok {
		return false, pub.Publish(ctx, rev)
	}
	res, err := rp.PublishResults(ctx, rev)
	if err == nil && len(res) == 1 && res[0].Duplicate {
		s.log.WarnContext(ctx, "the broker dropped the revision as a duplicate: it was published before",
			slog.String("revision_id", rev.ID))
		return true, nil
	}
	return false, err
}

// revisionPending is the error of a redrive of l, a parked letter with a
// revision that may be out.
func revisionPending(l Letter) error {
	return fmt.Errorf("%w: dead letter %d (consumer %q, message %q) has revision %s, which may have been published: "+
		"revise it again (the same revision) or discard it", ErrRevisionPending, l.ID, l.Consumer, l.MessageID, l.RevisionID)
}

// reviseHorizon records l's original message as consumed in the inbox of
// l's consumer (consumed) and refuses the revision when that consumer may
// have applied the original: the insert found a record (processed, in
// progress, or processed with another payload; a record of a message whose
// processing failed for good does not count) or, finding none, the letter
// is older than the consumer's inbox retention. The decision is the
// insert's, in tx: a copy the consumer commits meanwhile is seen by it.
// record is the expiry (microseconds) of the record the revision wrote or
// found its own, 0 for none.
//
// A record found is the revision's own when l was revised before and the
// record's expiry is the one that revision wrote (l.revisionRecord): it
// refuses nothing. A record a later copy of the original wrote (the first
// one collected after the inbox retention, then the original re-sent) has
// another expiry and refuses the revision again; a letter that waited past
// the inbox retention, whose record was collected, gets it written again
// and is refused as too old, as a first revision would be.
func (s *Store[TTx]) reviseHorizon(ctx context.Context, tx TTx, l Letter) (record int64, err error) {
	in := operator.InTx(s.d, s.d.Tx(tx))
	rec, recorded, retention, err := s.letterRetentionIn(ctx, in, l, "revise")
	if err != nil {
		return 0, err
	}
	keep := rec.Retention
	if !recorded {
		keep = DefaultInboxRetention
	}
	now := s.now()
	record = store.Micros(now.Add(keep))
	inserted, err := s.consumed(ctx, tx, l, now, record)
	if err != nil {
		return 0, fmt.Errorf("dlq: revise %d: %w", l.ID, err)
	}
	ref := &RefusedError{LetterID: l.ID, Consumer: l.Consumer, MessageID: l.MessageID,
		Age: now.Sub(l.FirstFailedAt), Retention: retention}
	if !inserted {
		original, found, err := operator.InboxRecordOf(ctx, in, l.Consumer, l.MessageID)
		if err != nil {
			return 0, fmt.Errorf("dlq: revise %d: %w", l.ID, err)
		}
		if found && original.State == lease.Failed {
			return 0, nil // the original was never applied
		}
		if found && l.revisionRecord != 0 && store.Micros(original.ExpiresAt) == l.revisionRecord {
			return l.revisionRecord, nil // the first revision's own
		}
		// Found, or gone again since the insert met it (collected
		// meanwhile): either way a record was there.
		ref.Reason, ref.OriginalState = RefusedOriginalProcessed, original.State
		return 0, ref
	}
	if ref.Retention > 0 && ref.Age > ref.Retention {
		ref.Reason = RefusedTooOld
		return record, ref // the record is written: a forced revision keeps it as its own
	}
	return record, nil
}

// revision is l's message under its revision id with the edited payload.
func revision(l Letter, payload []byte) idem.Message {
	id := l.RevisionID
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
// at now, expiring at expires (microseconds; now plus the inbox retention
// that consumer recorded, as its own rows are). inserted is false when a
// record of the id was there already: it is left as it is.
func (s *Store[TTx]) consumed(ctx context.Context, tx TTx, l Letter, now time.Time, expires int64) (inserted bool, err error) {
	fp := fpmatch.Payload(l.Payload)
	n, err := s.d.Tx(tx).Exec(ctx, s.d.Statements().Inbox.Insert, l.Consumer, l.MessageID, fp[:], store.Micros(now), expires)
	if err != nil {
		return false, fmt.Errorf("record %s/%s in the inbox: %w", l.Consumer, l.MessageID, err)
	}
	return n > 0, nil
}
