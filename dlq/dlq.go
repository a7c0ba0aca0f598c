// Package dlq is idem's dead-letter store: messages a consumer could not
// process (permanent errors, invalid payloads, a reused message id with a
// different payload, or too many transient failures) are parked in a SQL
// table in the same database, with everything an operator needs to decide:
// consumer, source subject/topic, position, message id, key, headers,
// payload, error text and class, attempts and failure times.
//
//	letters, err := dlq.New(d, dlq.Config{}) // what consumer.Config.DLQ defaults to
//	parked, err := letters.List(ctx, dlq.Filter{Consumer: "billing", State: dlq.Parked})
//	for _, l := range parked {
//		log.Println(l.ID, l.MessageID, l.ErrorClass, l.Error) // what failed, and why
//	}
//	// after the fix: the original message, with its id and headers, for its consumer only
//	_, err = letters.Redrive(ctx, parked[0].ID, "alice", publisher) // any broker.Publisher
//	err = letters.Discard(ctx, parked[1].ID, "alice")              // or give it up; each at most once
//
// An operator lists and inspects letters, then redrives them (republishes
// the original message, with its original id and headers, to the broker) or
// discards them. A letter is redriven or discarded at most once: both only
// act on a letter still in state parked. Redrive is safe even when the
// message had partly taken effect, because consumers dedup on the message
// id through their inbox. A redrive, and an edited revision ([Store.Revise]),
// is for the letter's consumer only: it carries broker.HeaderRedriveFor,
// and the other consumers of the subject acknowledge it unprocessed, since
// they applied the original already or hold letters of their own for it
// ([Store.OfMessage] lists them).
//
// Parking the same message again while its letter is still parked (the
// consumer crashed between parking and terminating the delivery, so the
// broker redelivered it) updates that letter instead of adding one: the
// unique key is (consumer, message id, payload fingerprint) among parked
// letters. A message id reused with a different payload gets its own letter,
// so neither payload is lost.
//
// A message that came without a usable id (its producer set none) is still
// parked: [FromMessage] gives its letter the id [SyntheticID], made of the
// broker's coordinates ("no-id:<subject>@<position>"). Text fields a
// database cannot store (invalid UTF-8, NUL) are stored with U+FFFD, so
// every message can be parked.
package dlq

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"math"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/broker"
	"github.com/idemkit/idem/internal/checks"
	"github.com/idemkit/idem/internal/errtext"
	"github.com/idemkit/idem/internal/fpmatch"
	"github.com/idemkit/idem/internal/obs"
	"github.com/idemkit/idem/internal/operator"
	"github.com/idemkit/idem/internal/origin"
	"github.com/idemkit/idem/internal/sqlset"
	"github.com/idemkit/idem/store"
)

// State is the lifecycle state of a dead letter.
type State string

// The states of a letter. A letter starts parked and ends redriven or
// discarded; it never goes back.
const (
	Parked    State = "parked"
	Redriven  State = "redriven"
	Discarded State = "discarded"
)

// ErrNotParked reports a redrive or discard of a letter that is no longer
// parked (already redriven or discarded): nothing was done.
var ErrNotParked = errors.New("dlq: letter is not parked")

// ErrRevisionPending reports a redrive of a parked letter whose revision
// ([Store.Revise]) may have been published: its publish failed or timed
// out, or the letter's resolution after it did not commit. Redriving the
// original beside a revision that is out would apply both, so it is
// refused, even with RedriveOptions.Force; nothing was published. Revise
// the letter again (the same revision id: a duplicate in the consumer's
// inbox if the first one is out) or discard it.
var ErrRevisionPending = errors.New("dlq: a revision of the letter may be out")

// ErrDroppedAsDuplicate reports a redrive the broker dropped because the
// original message id was published inside its duplicate window (JetStream
// Nats-Msg-Id dedup, default 2 minutes): nothing was delivered, so the
// letter stays parked. Redrive it again after the window has passed. From
// [Store.Revise] it reports a revision published again with another
// payload, dropped because the first one is out: the letter is resolved
// with the first payload.
var ErrDroppedAsDuplicate = errors.New("dlq: the broker dropped the message as a duplicate of an earlier publish")

// Letter is one dead letter.
type Letter struct {
	ID            int64             `json:"id"`              // assigned by the store
	Consumer      string            `json:"consumer"`        // consumer name that failed
	Source        string            `json:"source"`          // subject / topic / queue the message came from
	Position      string            `json:"position"`        // stream sequence, partition/offset or delivery tag
	MessageID     string            `json:"message_id"`      // the original, stable message id
	Key           string            `json:"key,omitempty"`   // ordering key, may be empty
	Headers       map[string]string `json:"headers"`         // original headers
	Payload       []byte            `json:"payload"`         // original payload (base64 in JSON)
	Error         string            `json:"error"`           // error text of the last failure
	ErrorClass    string            `json:"error_class"`     // idem.ErrorClass of the last failure
	Attempts      int               `json:"attempts"`        // delivery attempts when parked
	FirstFailedAt time.Time         `json:"first_failed_at"` // when the letter was first parked
	LastFailedAt  time.Time         `json:"last_failed_at"`  // when it was last parked
	State         State             `json:"state"`           // parked, redriven or discarded
	RedrivenBy    string            `json:"redriven_by,omitempty"`
	RedrivenAt    time.Time         `json:"redriven_at,omitzero"`
	ResolvedBy    string            `json:"resolved_by,omitempty"` // who redrove or discarded it
	ResolvedAt    time.Time         `json:"resolved_at,omitzero"`  // when it left state parked
	CreatedAt     time.Time         `json:"created_at"`
	// RedriveReason is the reason given for a forced redrive past a
	// replay-horizon refusal (see [RedriveOptions]); empty otherwise.
	RedriveReason string `json:"redrive_reason,omitempty"`
	// RevisionID and RevisionPayload are the message id and payload of
	// the letter's revision ([Store.Revise]), recorded before the revision
	// is published; empty when it has none. A parked letter with a
	// RevisionID has a revision that may be out ([ErrRevisionPending]). A
	// discarded one keeps them: its revision was published, unless it was
	// discarded while the revision was pending.
	RevisionID      string `json:"revision_id,omitempty"`
	RevisionPayload []byte `json:"revision_payload,omitempty"`
	// revisionRecord is the expiry (microseconds) of the inbox record the
	// revision wrote for the original, 0 for none.
	revisionRecord int64
}

// NoIDPrefix begins the message id of a letter whose message came without a
// usable id (see [SyntheticID]).
const NoIDPrefix = operator.NoIDPrefix

// SyntheticID is the message id of the letter of a message that has no
// usable id of its own (its producer set none, or an invalid one): its
// broker coordinates, NoIDPrefix + subject + "@" + position (JetStream
// subject and stream sequence, Kafka topic and partition/offset), which a
// redelivery of the same message repeats, or NoIDPrefix + "sha256:" + the
// hash of both when they do not make a valid id (too long, control
// characters).
func SyntheticID(msg idem.Message) string {
	id := NoIDPrefix + msg.Subject + "@" + msg.Position
	if checks.ID(id) == nil {
		return id
	}
	sum := sha256.Sum256([]byte(msg.Subject + "\x00" + msg.Position))
	return NoIDPrefix + "sha256:" + hex.EncodeToString(sum[:16])
}

// FromMessage builds the letter for msg that consumer failed to process
// with err. A message without a usable id (checks.ID fails) gets
// [SyntheticID] as the letter's MessageID, so that it can still be parked.
func FromMessage(consumer string, msg idem.Message, err error) Letter {
	id := msg.ID
	if checks.ID(id) != nil {
		id = SyntheticID(msg)
	}
	l := Letter{
		Consumer:  consumer,
		Source:    msg.Subject,
		Position:  msg.Position,
		MessageID: id,
		Key:       msg.Key,
		Headers:   msg.Headers,
		Payload:   msg.Payload,
		Attempts:  max(msg.Attempt, 1),
	}
	if err != nil {
		l.Error = err.Error()
		l.ErrorClass = idem.ErrorClass(err)
	}
	return l
}

// Message rebuilds the original message for republishing: same id, subject,
// key, headers and payload. Attempt and Position are left zero, and the
// origin headers the consumer recorded (origin.Prefix) are dropped:
// the broker assigns new ones.
func (l Letter) Message() idem.Message {
	h := l.Headers
	for k := range h {
		if origin.IsHeader(k) {
			h = maps.Clone(h)
			maps.DeleteFunc(h, func(k, _ string) bool { return origin.IsHeader(k) })
			break
		}
	}
	return idem.Message{ID: l.MessageID, Subject: l.Source, Key: l.Key, Headers: h, Payload: l.Payload}
}

// LogValue implements slog.LogValuer without the payload.
func (l Letter) LogValue() slog.Value {
	return slog.GroupValue(
		slog.Int64("id", l.ID), slog.String("consumer", l.Consumer), slog.String("message_id", l.MessageID),
		slog.String("source", l.Source), slog.String("error_class", l.ErrorClass), slog.Int("attempts", l.Attempts),
		slog.String("state", string(l.State)))
}

// Config configures a Store.
type Config struct {
	// Now returns the current time. Defaults to time.Now.
	Now func() time.Time
	// Logger receives a warning for every letter parked and an info line
	// per redrive or discard. Defaults to slog.Default().
	Logger *slog.Logger
	// InboxRetention, if set, returns how long the caller says the inbox
	// of consumer remembers a message id: a redrive of a letter older than
	// that is refused (see [Store.RedriveWith]). It may only shorten what
	// the consumer recorded when it started (see [Store.InboxRetention]):
	// a longer value refuses the redrive with [ErrRetentionOverstated].
	// Without it, the recorded retention is used (DefaultInboxRetention
	// for a consumer that recorded none).
	InboxRetention func(consumer string) time.Duration
}

// Store is the dead-letter store of one database. It is safe for
// concurrent use.
type Store[TTx any] struct {
	d         store.Driver[TTx]
	q         sqlset.DeadLetters
	now       func() time.Time
	log       *slog.Logger
	retention func(consumer string) time.Duration
}

// New returns the dead-letter store of d. The table comes from migration
// 0005_dead_letters.
func New[TTx any](d store.Driver[TTx], cfg Config) (*Store[TTx], error) {
	if d == nil {
		return nil, checks.Optionf("dlq: nil driver")
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	return &Store[TTx]{d: d, q: d.Statements().DeadLetters, now: cfg.Now,
		log: obs.Component(cfg.Logger, "dlq"), retention: cfg.InboxRetention}, nil
}

// ParkTx parks l in the caller's transaction and returns the letter's id:
// it becomes visible when tx commits and vanishes if tx rolls back. If the
// same message (consumer, message id, payload) is already parked, that
// letter's attempts, error and last failure time are updated and its id is
// returned. Consumer (at most idem.MaxKeyLen bytes, as a consumer name)
// and MessageID are required. The payload is stored byte
// for byte; invalid UTF-8 and NUL bytes in Source, Position, Key and
// ErrorClass (which no text column of PostgreSQL accepts) are stored as
// U+FFFD, so any message can be parked. Error is stored with invalid UTF-8
// as U+FFFD and NUL bytes removed, cut on a rune boundary to at most 4 KiB.
func (s *Store[TTx]) ParkTx(ctx context.Context, tx TTx, l Letter) (int64, error) {
	return s.park(ctx, s.d.Tx(tx), l)
}

// Park parks l in its own transaction; see [Store.ParkTx].
func (s *Store[TTx]) Park(ctx context.Context, l Letter) (int64, error) {
	return s.park(ctx, s.d.Pool(), l)
}

func (s *Store[TTx]) park(ctx context.Context, q store.Querier, l Letter) (int64, error) {
	if l.Consumer == "" || l.MessageID == "" {
		return 0, fmt.Errorf("%w: dlq: letter needs a consumer and a message id", idem.ErrInvalidInput)
	}
	if len(l.Consumer) > idem.MaxKeyLen {
		return 0, fmt.Errorf("%w: dlq: consumer of %d bytes exceeds %d", idem.ErrInvalidInput, len(l.Consumer), idem.MaxKeyLen)
	}
	headers := l.Headers
	if headers == nil {
		headers = map[string]string{}
	}
	hj, err := json.Marshal(headers)
	if err != nil {
		return 0, fmt.Errorf("dlq: headers: %w", err)
	}
	payload := l.Payload
	if payload == nil {
		payload = []byte{}
	}
	now := s.now()
	if !l.LastFailedAt.IsZero() {
		now = l.LastFailedAt
	}
	var id int64
	err = q.QueryRow(ctx, s.q.Park, l.Consumer, storable(l.Source), storable(l.Position), l.MessageID, storable(l.Key),
		string(hj), payload, fpmatch.Payload(payload).Bytes(), errtext.Clean(l.Error), storable(l.ErrorClass),
		max(l.Attempts, 1), store.Micros(now)).Scan(&id)
	if err != nil {
		return 0, fmt.Errorf("dlq: park %s/%s: %w", l.Consumer, l.MessageID, err)
	}
	s.log.WarnContext(ctx, "message parked in the dead-letter store", slog.Int64("letter", id),
		slog.String("consumer", l.Consumer), slog.String("message_id", l.MessageID),
		slog.String("error_class", l.ErrorClass), slog.String("error", l.Error), slog.Int("attempt", l.Attempts))
	return id, nil
}

// storable makes s storable in a text column of every dialect (PostgreSQL
// refuses invalid UTF-8 and NUL): those bytes become U+FFFD. A letter that
// could not be stored would leave its message retried forever.
func storable(s string) string {
	if utf8.ValidString(s) && !strings.Contains(s, "\x00") {
		return s
	}
	return strings.ReplaceAll(strings.ToValidUTF8(s, "\uFFFD"), "\x00", "\uFFFD")
}

// Get returns the letter with id, or an error wrapping idem.ErrNotFound.
func (s *Store[TTx]) Get(ctx context.Context, id int64) (Letter, error) {
	l, err := scanLetter(s.d.Pool().QueryRow(ctx, s.q.Get, id))
	if errors.Is(err, store.ErrNoRows) {
		return Letter{}, fmt.Errorf("%w: dead letter %d", idem.ErrNotFound, id)
	}
	return l, err
}

// Filter selects letters. Zero fields do not filter.
type Filter struct {
	Consumer   string
	Since      time.Time // last failure at or after
	Until      time.Time // last failure before
	ErrorClass string
	State      State // "" = every state
	AfterID    int64 // only letters with a greater id (paging)
	Limit      int   // defaults to 100; negative = no limit
}

// List returns the letters matching f, oldest id first.
func (s *Store[TTx]) List(ctx context.Context, f Filter) ([]Letter, error) {
	limit := int64(f.Limit)
	switch {
	case limit == 0:
		limit = 100
	case limit < 0:
		limit = math.MaxInt64
	}
	afterID := max(f.AfterID, 0)
	rows, err := s.d.Pool().Query(ctx, s.q.List, f.Consumer, store.Micros(f.Since), store.Micros(f.Until),
		f.ErrorClass, string(f.State), afterID, limit)
	if err != nil {
		return nil, fmt.Errorf("dlq: list: %w", err)
	}
	return scanLetters(rows)
}

// Redrive republishes letter id through pub with its original message id,
// subject, key, headers and payload, and marks it redriven by by (who).
//
// The letter is claimed (parked → redriven) in a transaction that commits
// only after pub returned: if publishing fails the letter stays parked. A
// letter that is not parked is refused with [ErrNotParked], so redriving
// twice never publishes twice; concurrent redrives of one letter are
// serialised by the database and only one publishes. If the process dies
// after the broker accepted the message and before the commit, the letter
// stays parked and a later redrive publishes it again: the consumer's inbox
// absorbs that duplicate.
//
// The republished message carries broker.HeaderRedriveFor with the
// letter's consumer: it reaches every consumer of the subject, but only the
// letter's own consumer processes it; the others acknowledge it unprocessed
// (they applied the original already, or hold their own letter for it).
//
// The republished message carries broker.HeaderRedrive with the letter's
// id, so brokers that dedup on the message id inside a window (JetStream)
// accept the redrive as a new publish, while the consumer still sees the
// original id. Should a broker still report the message as a duplicate, the
// redrive fails with [ErrDroppedAsDuplicate] and the letter stays parked.
//
// A letter whose message id may already have been processed and forgotten
// is refused with an error wrapping [ErrRedriveRefused] that says why (see
// [Store.RedriveWith], which can force it). A letter with a revision that
// may be out is refused with [ErrRevisionPending], which no option forces.
func (s *Store[TTx]) Redrive(ctx context.Context, id int64, by string, pub broker.Publisher) (Letter, error) {
	return s.RedriveWith(ctx, id, by, pub, RedriveOptions{})
}

// RedriveWith is [Store.Redrive] with options. Before publishing it checks
// the replay horizon (see [ErrRedriveRefused]); opt.Force with a non-empty
// opt.Reason redrives anyway, recording the reason with the letter
// (RedriveReason) and logging a warning. The redrive is recorded in the
// audit log (see [Store.DiscardWith]) with by and opt.Reason.
func (s *Store[TTx]) RedriveWith(ctx context.Context, id int64, by string, pub broker.Publisher, opt RedriveOptions) (Letter, error) {
	var l Letter
	err := s.audited(ctx, auditRedrive, id, by, opt.Reason, "", func() (string, error) {
		var err error
		var forced bool
		if l, forced, err = s.redrive(ctx, id, by, pub, opt); err != nil {
			return "", err
		}
		return redriveDetails(l, forced), nil
	})
	return l, err
}

// redrive is RedriveWith without the audit log. forced reports whether
// opt.Force overrode a refusal of the replay-horizon check.
func (s *Store[TTx]) redrive(ctx context.Context, id int64, by string, pub broker.Publisher, opt RedriveOptions) (l Letter, forced bool, err error) {
	if opt.Force && strings.TrimSpace(opt.Reason) == "" {
		return Letter{}, false, checks.Optionf("dlq: a forced redrive needs a reason")
	}
	if pub == nil {
		return Letter{}, false, checks.Optionf("dlq: redrive needs a publisher")
	}
	err = store.InTx(ctx, s.d, func(tx TTx) error {
		var err error
		forced = false // a retried transaction decides again
		reason := ""
		if opt.Force {
			reason = storable(opt.Reason)
		}
		l, err = scanLetter(s.d.Tx(tx).QueryRow(ctx, s.q.ClaimRedrive, id, by, store.Micros(s.now()), reason))
		if errors.Is(err, store.ErrNoRows) {
			return s.notParked(ctx, id)
		}
		if err != nil {
			return err
		}
		if err := s.checkHorizon(ctx, tx, l); err != nil {
			if !opt.Force || !errors.Is(err, ErrRedriveRefused) {
				return err
			}
			forced = true
			s.log.WarnContext(ctx, "dead letter redriven past its replay horizon", slog.Int64("letter", id),
				slog.String("by", by), slog.String("reason", opt.Reason), slog.String("refusal", err.Error()))
		}
		msg := redriveMessage(l)
		if rp, ok := pub.(broker.ResultPublisher); ok {
			res, err := rp.PublishResults(ctx, msg)
			if err != nil {
				return fmt.Errorf("dlq: redrive %d: publish: %w", id, err)
			}
			if len(res) == 1 && res[0].Duplicate {
				return fmt.Errorf("%w: dead letter %d (message %q)", ErrDroppedAsDuplicate, id, l.MessageID)
			}
			return nil
		}
		if err := pub.Publish(ctx, msg); err != nil {
			return fmt.Errorf("dlq: redrive %d: publish: %w", id, err)
		}
		return nil
	})
	if err != nil {
		return Letter{}, false, err
	}
	s.log.InfoContext(ctx, "dead letter redriven", slog.Int64("letter", id), slog.String("by", by),
		slog.String("consumer", l.Consumer), slog.String("message_id", l.MessageID))
	return l, forced, nil
}

// redriveMessage is the letter's message marked as a deliberate republish.
func redriveMessage(l Letter) idem.Message {
	m := l.Message()
	h := make(map[string]string, len(m.Headers)+1)
	for k, v := range m.Headers {
		h[k] = v
	}
	h[broker.HeaderRedrive] = strconv.FormatInt(l.ID, 10)
	h[broker.HeaderRedriveFor] = l.Consumer
	m.Headers = h
	return m
}

// notParked explains why a letter could not be claimed.
func (s *Store[TTx]) notParked(ctx context.Context, id int64) error {
	l, err := s.Get(ctx, id)
	if err != nil {
		return err
	}
	return unclaimable(l)
}

// unclaimable is the error of a redrive, revision or discard of l that
// found it resolved (ErrNotParked) or, for a redrive, parked with a
// revision that may be out (ErrRevisionPending).
func unclaimable(l Letter) error {
	if l.State == Parked && l.RevisionID != "" {
		return revisionPending(l)
	}
	return fmt.Errorf("%w: dead letter %d is %s (by %q at %s)", ErrNotParked, l.ID, l.State, l.ResolvedBy,
		l.ResolvedAt.Format(time.RFC3339))
}

// RedriveAll redrives every parked letter matching f (its State is forced
// to parked and its Limit ignored), oldest first, and returns how many it
// redrove. progress, if not nil, is called after each letter with the
// letters done so far and the total counted at the start. It stops at the
// first error; letters already redriven stay redriven. Letters parked after
// the call started are not included.
//
// Letters refused by the replay-horizon check ([ErrRedriveRefused]) or
// with a revision that may be out ([ErrRevisionPending]) are skipped, not
// redriven; the others still are, and the refusals are
// returned together at the end.
func (s *Store[TTx]) RedriveAll(ctx context.Context, f Filter, by string, pub broker.Publisher, progress func(done, total int)) (int, error) {
	return s.RedriveAllWith(ctx, f, by, pub, RedriveOptions{}, progress)
}

// RedriveAllWith is [Store.RedriveAll] with options (see
// [Store.RedriveWith]).
func (s *Store[TTx]) RedriveAllWith(ctx context.Context, f Filter, by string, pub broker.Publisher, opt RedriveOptions, progress func(done, total int)) (int, error) {
	f.State, f.Limit, f.AfterID = Parked, -1, 0
	all, err := s.List(ctx, f)
	if err != nil {
		return 0, err
	}
	done := 0
	var refused []error
	for _, l := range all {
		if _, err := s.RedriveWith(ctx, l.ID, by, pub, opt); err != nil {
			if errors.Is(err, ErrNotParked) { // resolved meanwhile by someone else
				continue
			}
			if errors.Is(err, ErrRedriveRefused) || errors.Is(err, ErrRevisionPending) {
				refused = append(refused, err)
				continue
			}
			return done, errors.Join(append(refused, err)...)
		}
		done++
		if progress != nil {
			progress(done, len(all))
		}
	}
	return done, errors.Join(refused...)
}

// Discard marks letter id discarded by by (who): it will never be
// redriven. A letter that is not parked is refused with [ErrNotParked].
// It is recorded in the audit log (see [Store.DiscardWith]).
func (s *Store[TTx]) Discard(ctx context.Context, id int64, by string) error {
	return s.DiscardWith(ctx, id, by, DiscardOptions{})
}

// discard is Discard without the audit log.
func (s *Store[TTx]) discard(ctx context.Context, id int64, by string) error {
	n, err := s.d.Pool().Exec(ctx, s.q.Discard, id, by, store.Micros(s.now()))
	if err != nil {
		return fmt.Errorf("dlq: discard %d: %w", id, err)
	}
	if n == 0 {
		return s.notParked(ctx, id)
	}
	s.log.InfoContext(ctx, "dead letter discarded", slog.Int64("letter", id), slog.String("by", by))
	return nil
}

// CountParked returns the number of parked letters per consumer;
// consumers without parked letters are absent.
func (s *Store[TTx]) CountParked(ctx context.Context) (map[string]int64, error) {
	return operator.DLQCountParked(ctx, s.d)
}

type scanner interface{ Scan(dest ...any) error }

func scanLetter(r scanner) (Letter, error) {
	var l Letter
	var headers, state string
	var fp []byte
	var first, last, redrivenAt, resolvedAt, created int64
	var attempts int64
	err := r.Scan(&l.ID, &l.Consumer, &l.Source, &l.Position, &l.MessageID, &l.Key, &headers, &l.Payload, &fp,
		&l.Error, &l.ErrorClass, &attempts, &first, &last, &state, &l.RedrivenBy, &redrivenAt,
		&l.ResolvedBy, &resolvedAt, &created, &l.RedriveReason, &l.RevisionID, &l.RevisionPayload, &l.revisionRecord)
	if err != nil {
		return Letter{}, err
	}
	if err := json.Unmarshal([]byte(headers), &l.Headers); err != nil {
		return Letter{}, fmt.Errorf("dlq: letter %d headers: %w", l.ID, err)
	}
	l.Attempts = int(attempts)
	l.FirstFailedAt, l.LastFailedAt = store.FromMicros(first), store.FromMicros(last)
	l.RedrivenAt, l.ResolvedAt, l.CreatedAt = store.FromMicros(redrivenAt), store.FromMicros(resolvedAt), store.FromMicros(created)
	l.State = State(state)
	return l, nil
}
