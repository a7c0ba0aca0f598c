package dlq

import (
	"context"
	"errors"
	"fmt"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/broker"
	"github.com/idemkit/idem/internal/audit"
)

// The audit-log actions of the store: every redrive, discard and revision,
// whoever takes it (the console, the idem command, a program), is recorded
// in the operator audit log (table audit_log, migration 0006_audit) as
// action "dlq.redrive", "dlq.discard" or "dlq.revise" on target
// "letter <id>", with the actor (by) and the reason given: a row with
// outcome "started" before the action runs, completed with "ok" or
// "failed: …" after. When that row cannot be written the action is not
// taken. The console lists the log (/console/audit), and so does "idem
// audit list".
const (
	auditRedrive = "dlq.redrive"
	auditDiscard = "dlq.discard"
	auditRevise  = "dlq.revise"
)

// DiscardOptions tune [Store.DiscardWith].
type DiscardOptions struct {
	// Reason says why the letter is discarded; recorded in the audit log.
	Reason string
}

// ReviseOptions tune [Store.ReviseWith].
type ReviseOptions struct {
	// Force revises a letter the check of [Store.Revise] refuses (its
	// original may have been applied). It needs a Reason.
	Force bool
	// Reason says why the letter is revised; recorded in the audit log. A
	// forced revision needs one saying why it is safe (the operator
	// checked that the original was never applied, or that applying the
	// revision beside it is meant).
	Reason string
}

// DiscardWith is [Store.Discard] with options: the discard is recorded in
// the operator audit log with by and opt.Reason (action "dlq.discard",
// target "letter <id>"), before it is taken and with its outcome after;
// when the log cannot be written nothing is discarded.
func (s *Store[TTx]) DiscardWith(ctx context.Context, id int64, by string, opt DiscardOptions) error {
	return s.audited(ctx, auditDiscard, id, by, opt.Reason, "", func() (string, error) {
		return "", s.discard(ctx, id, by)
	})
}

// ReviseWith is [Store.Revise] with options: the revision is recorded in
// the operator audit log with by and opt.Reason (action "dlq.revise",
// target "letter <id>", the details naming the original and the revision's
// message id), before it is published and with its outcome after; when the
// log cannot be written nothing is published.
func (s *Store[TTx]) ReviseWith(ctx context.Context, id int64, by string, payload []byte, pub broker.Publisher, opt ReviseOptions) (Letter, idem.Message, error) {
	var l Letter
	var rev idem.Message
	err := s.audited(ctx, auditRevise, id, by, opt.Reason, fmt.Sprintf("edited payload %d bytes", len(payload)), func() (string, error) {
		var err error
		var did revised
		l, rev, did, err = s.revise(ctx, id, by, payload, pub, opt)
		if err != nil && !errors.Is(err, ErrDroppedAsDuplicate) {
			return "", err
		}
		d := fmt.Sprintf("original message=%q revision message=%q", l.MessageID, rev.ID)
		if err != nil { // resolved with the revision recorded before
			d += " dropped by the broker as a duplicate of the revision published before"
		}
		if did.again {
			d += " published again (the revision was recorded earlier)"
		}
		if did.changed {
			d += " with another payload than the one recorded"
		}
		if did.forced {
			d += " forced past the replay check"
		}
		return d, err
	})
	return l, rev, err
}

// audited runs act between the two writes of its audit-log entry.
func (s *Store[TTx]) audited(ctx context.Context, action string, id int64, by, reason, details string, act func() (string, error)) error {
	return audit.Run(ctx, s.d, s.now, by, action, fmt.Sprintf("letter %d", id), reason, details, act)
}

// redriveDetails is the audit entry's details of a redrive of l; forced
// when RedriveOptions.Force overrode a refusal of the horizon check.
func redriveDetails(l Letter, forced bool) string {
	d := fmt.Sprintf("consumer=%q message=%q", l.Consumer, l.MessageID)
	if forced {
		d += " forced past the replay horizon check"
	}
	return d
}
