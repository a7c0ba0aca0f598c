package dlq

import (
	"context"
	"errors"
	"fmt"
	"github.com/idemkit/idem/internal/operator"
	"time"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/horizon"
)

// DefaultInboxRetention is the inbox retention the store assumes for a
// consumer that recorded none (inbox.Inbox.RecordRetention; it has not
// started since migration 0015_consumer_horizons): the inbox's default.
const DefaultInboxRetention = 7 * 24 * time.Hour

// ErrRetentionOverstated reports an inbox retention given to the store
// (Config.InboxRetention; the idem dlq command's --inbox-retention)
// longer than the one the letter's consumer recorded when it started
// (inbox.Inbox.RecordRetention), or, for a consumer that recorded
// none, longer than [DefaultInboxRetention], which cannot be checked: a
// redrive judged by it could apply again a message whose id the inbox has
// already forgotten. It is refused even with RedriveOptions.Force (a
// forced redrive needs no retention); nothing was published.
var ErrRetentionOverstated = errors.New("dlq: the inbox retention given is longer than the consumer's own")

// RetentionClaimError is an inbox retention given to the store that is
// longer than the consumer's own. It matches [ErrRetentionOverstated].
type RetentionClaimError struct {
	Consumer string
	// Claimed is the retention given; Own the one the consumer recorded
	// at RecordedAt, or DefaultInboxRetention when it recorded none
	// (RecordedAt zero).
	Claimed, Own time.Duration
	RecordedAt   time.Time
}

// Error implements error.
func (e *RetentionClaimError) Error() string {
	if e.RecordedAt.IsZero() {
		return fmt.Sprintf("%v: consumer %q recorded no inbox retention (it has not started since migration 0015), so the default %s "+
			"applies and %s cannot be checked; start the consumer once (it records its retention), "+
			"or judge by no more than the default and redrive older letters with --force --reason",
			ErrRetentionOverstated, e.Consumer, horizon.Format(e.Own), horizon.Format(e.Claimed))
	}
	return fmt.Sprintf("%v: consumer %q keeps message ids %s (recorded when it started, %s), not %s; "+
		"a letter older than that is redriven only with --force --reason",
		ErrRetentionOverstated, e.Consumer, horizon.Format(e.Own), e.RecordedAt.UTC().Format(time.RFC3339), horizon.Format(e.Claimed))
}

// Is reports whether target is ErrRetentionOverstated.
func (e *RetentionClaimError) Is(target error) bool { return target == ErrRetentionOverstated }

// InboxRetention returns the inbox retention the letters of consumer are
// checked against on redrive: the one the consumer recorded when it last
// started (DefaultInboxRetention when it recorded none), or the shorter
// one Config.InboxRetention gives. A longer Config.InboxRetention is a
// [RetentionClaimError].
func (s *Store[TTx]) InboxRetention(ctx context.Context, consumer string) (time.Duration, error) {
	rec, found, err := operator.RecordedRetention(ctx, s.d, consumer)
	if err != nil {
		return 0, fmt.Errorf("dlq: %w", err)
	}
	return s.judgeRetention(consumer, rec, found)
}

// LetterRetention returns the inbox retention letter l is checked against
// on redrive: [Store.InboxRetention], or the shorter retention its
// consumer had before widening it, when l first failed before that shorter
// one ran its course since the widening (its message may have been
// recorded, and collected, under it).
func (s *Store[TTx]) LetterRetention(ctx context.Context, l Letter) (time.Duration, error) {
	rec, found, err := operator.RecordedRetention(ctx, s.d, l.Consumer)
	if err != nil {
		return 0, fmt.Errorf("dlq: %w", err)
	}
	return s.letterRetention(l, rec, found)
}

// letterRetention is LetterRetention on what l's consumer recorded. An
// operator's stated retention (Config.InboxRetention) is judged against the
// retention the consumer records now; the shorter one of a widening caps
// the result.
func (s *Store[TTx]) letterRetention(l Letter, rec operator.Recorded, found bool) (time.Duration, error) {
	r, err := s.judgeRetention(l.Consumer, rec, found)
	if err != nil {
		return 0, err
	}
	if p := rec.RetentionFor(l.FirstFailedAt); found && p < r {
		r = p
	}
	return r, nil
}

// letterRetentionIn is letterRetention on what l's consumer recorded, read
// through in (a transaction's): what was recorded, whether anything was,
// and the retention l is judged by. op names the operation in errors.
func (s *Store[TTx]) letterRetentionIn(ctx context.Context, in operator.DB, l Letter, op string) (rec operator.Recorded, recorded bool, retention time.Duration, err error) {
	rec, recorded, err = operator.RecordedRetention(ctx, in, l.Consumer)
	if err != nil {
		return rec, false, 0, fmt.Errorf("dlq: %s %d: %w", op, l.ID, err)
	}
	retention, err = s.letterRetention(l, rec, recorded)
	return rec, recorded, retention, err
}

// judgeRetention is InboxRetention on what consumer recorded.
func (s *Store[TTx]) judgeRetention(consumer string, rec operator.Recorded, found bool) (time.Duration, error) {
	own := rec.Retention
	if !found {
		own, rec.RecordedAt = DefaultInboxRetention, time.Time{}
	}
	if s.retention == nil {
		return own, nil
	}
	claimed := s.retention(consumer)
	if claimed <= 0 { // no claim for this consumer
		return own, nil
	}
	if claimed > own {
		return 0, &RetentionClaimError{Consumer: consumer, Claimed: claimed, Own: own, RecordedAt: rec.RecordedAt}
	}
	return claimed, nil
}

// RedriveOptions tune [Store.RedriveWith].
type RedriveOptions struct {
	// Force redrives a letter the replay-horizon check refuses. It needs a
	// Reason.
	Force bool
	// Reason says why the letter is redriven; it is recorded in the audit
	// log. A forced redrive needs one saying why it is safe (the operator
	// checked that the message was never applied), and it is then also
	// stored with the letter (RedriveReason).
	Reason string
}

// ErrRedriveRefused reports a redrive refused because the letter's message
// id may already have been processed and then forgotten by its consumer's
// inbox, so the redriven message would be applied as new (a second
// effect): see [RefusedError] for the reasons. Nothing was published; the
// letter stays parked. Redrive it with RedriveOptions{Force: true, Reason:
// …} after checking, or discard it.
var ErrRedriveRefused = errors.New("dlq: redrive refused: the message may already have been processed and forgotten")

// Reasons of a [RefusedError].
const (
	// RefusedTooOld: the letter is older than its consumer's inbox
	// retention; had the message id been processed, its record would be
	// gone.
	RefusedTooOld = "older_than_inbox_retention"
	// RefusedOriginalExpired: the letter was parked for a fingerprint
	// mismatch (the id was processed with another payload) and the
	// original's inbox record has expired or been collected: the redrive
	// would be processed as a new message.
	RefusedOriginalExpired = "mismatch_original_expired"
	// RefusedOriginalProcessed: a revision ([Store.Revise]) of a letter
	// whose message id its consumer's inbox holds as processed or in
	// progress: the revision, a new id, would be applied beside the
	// original.
	RefusedOriginalProcessed = "original_processed"
)

// RefusedError is a redrive refused by the replay-horizon check. It
// matches [ErrRedriveRefused].
type RefusedError struct {
	LetterID  int64
	Consumer  string
	MessageID string
	// Reason is RefusedTooOld, RefusedOriginalExpired or
	// RefusedOriginalProcessed.
	Reason string
	// OriginalState is, for RefusedOriginalProcessed, the state of the
	// inbox record found ("completed", "in_progress"; empty when the
	// record was committed by a transaction the revision's snapshot does
	// not show).
	OriginalState string
	// Age is the letter's age (since it was first parked); Retention the
	// consumer's inbox retention.
	Age, Retention time.Duration
	// OriginalExpiredAt is when the original's inbox record expired (zero
	// when it is gone).
	OriginalExpiredAt time.Time
}

// Error implements error.
func (e *RefusedError) Error() string {
	switch e.Reason {
	case RefusedOriginalProcessed:
		state := ""
		if e.OriginalState != "" {
			state = " (" + e.OriginalState + ")"
		}
		return fmt.Sprintf("%v: dead letter %d (consumer %q, message %q): the consumer's inbox holds the message id%s, "+
			"so its original (or another copy of the id) was applied or is being applied, and a revision, a new message, "+
			"would be a second effect; check, then revise with force and a reason, or discard",
			ErrRedriveRefused, e.LetterID, e.Consumer, e.MessageID, state)
	case RefusedOriginalExpired:
		why := "has been collected"
		if !e.OriginalExpiredAt.IsZero() {
			why = "expired at " + e.OriginalExpiredAt.UTC().Format(time.RFC3339)
		}
		return fmt.Sprintf("%v: dead letter %d (consumer %q, message %q) was parked for a fingerprint mismatch: "+
			"the id was processed with another payload, and that inbox record %s, so this payload would be applied "+
			"as a new message (a second effect for one id); check, then redrive with --force --reason or discard",
			ErrRedriveRefused, e.LetterID, e.Consumer, e.MessageID, why)
	default:
		return fmt.Sprintf("%v: dead letter %d (consumer %q, message %q) is %s old, longer than the consumer's inbox "+
			"retention %s: had the id been processed meanwhile its record is gone and the redrive would apply it again; "+
			"check, then redrive with --force --reason or discard",
			ErrRedriveRefused, e.LetterID, e.Consumer, e.MessageID, horizon.Format(e.Age.Round(time.Second)), horizon.Format(e.Retention))
	}
}

// Is reports whether target is ErrRedriveRefused.
func (e *RefusedError) Is(target error) bool { return target == ErrRedriveRefused }

// checkHorizon refuses l when its message id may have been processed and
// forgotten: no live inbox record for (consumer, message id) — absent, or
// past its expiry, when the GC may delete it before the redrive arrives —
// and either the letter is a fingerprint mismatch (the id was processed
// with another payload) or it is older than the consumer's inbox
// retention (see [Store.InboxRetention]; an overstated retention is a
// [RetentionClaimError], whatever the letter). With a live record the inbox
// still recognises the id, so the redrive is safe either way.
func (s *Store[TTx]) checkHorizon(ctx context.Context, tx TTx, l Letter) error {
	now := s.now()
	in := operator.InTx(s.d, s.d.Tx(tx))
	_, _, retention, err := s.letterRetentionIn(ctx, in, l, "redrive")
	if err != nil {
		return err
	}
	original, found, err := operator.InboxRecordOf(ctx, in, l.Consumer, l.MessageID)
	if err != nil {
		return fmt.Errorf("dlq: redrive %d: %w", l.ID, err)
	}
	exp := original.ExpiresAt
	if found && (exp.IsZero() || exp.After(now)) {
		return nil
	}
	ref := &RefusedError{LetterID: l.ID, Consumer: l.Consumer, MessageID: l.MessageID,
		Age: now.Sub(l.FirstFailedAt), Retention: retention}
	ref.OriginalExpiredAt = exp // zero when the record is gone
	if l.ErrorClass == idem.ErrorClass(idem.ErrFingerprintMismatch) {
		ref.Reason = RefusedOriginalExpired
		return ref
	}
	if ref.Retention > 0 && ref.Age > ref.Retention {
		ref.Reason = RefusedTooOld
		return ref
	}
	return nil
}
