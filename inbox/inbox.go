// Package inbox is the idempotent consumer: it records (consumer, message id)
// in the caller's transaction, through the table's primary key, and runs the
// handler only for the first delivery of each message.
//
// One delivery, whatever the broker:
//
//	ib, err := inbox.New(d, inbox.Config{})
//	res, err := ib.Process(ctx, "billing", msg, func(ctx context.Context, tx pgx.Tx, msg idem.Message) error {
//		_, err := tx.Exec(ctx, `INSERT INTO invoices (order_id) VALUES ($1) ON CONFLICT DO NOTHING`, msg.Key)
//		return err // rolls the inbox record back too: the redelivery is processed
//	})
//	switch {
//	case err == nil: // inbox.Processed or inbox.Duplicate: committed, acknowledge now
//	case idem.IsPermanent(err): // dead-letter it (package dlq)
//	default: // transient: let the broker redeliver
//	}
//
// With a broker, package consumer runs this loop (acks, backoff, dead
// letters, batches).
//
// The flow for one message:
//
//	begin
//	INSERT inbox row … ON CONFLICT DO NOTHING
//	  not inserted → duplicate: compare fingerprints (mismatch →
//	                 idem.ErrFingerprintMismatch), handler not run
//	  inserted     → run the handler with the same transaction
//	commit, then acknowledge the broker
//
// Crash, retry and duplicate:
//   - The inbox row and the handler's writes commit together or not at all.
//     A handler error rolls both back, so the redelivery is processed.
//   - A crash after commit and before the broker ack leads to a redelivery
//     that finds the row: reported as [Duplicate], handler not run, ack it.
//   - Concurrent deliveries of one message block on the primary key: on
//     PostgreSQL (READ COMMITTED) the second insert waits for the first
//     transaction and then does nothing; the inbox then re-reads the row in a
//     new statement. On SQLite writers are serialised by BEGIN IMMEDIATE.
//   - Same id with a different payload fails loudly with
//     idem.ErrFingerprintMismatch; nothing is written.
//   - A dead-letter redrive or revision (package dlq) addressed to another
//     consumer (header broker.HeaderRedriveFor) is reported as [Duplicate]
//     before anything is written: handler not run, ack it.
//
// For operations too long for one transaction, [Inbox.Claim] records the
// message in_progress under a lease, and [Inbox.CompleteTx] finalises it
// with a fencing token; abandoned claims are recovered after their lease.
package inbox

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/broker"
	"github.com/idemkit/idem/internal/checks"
	"github.com/idemkit/idem/internal/fpmatch"
	"github.com/idemkit/idem/internal/lease"
	"github.com/idemkit/idem/internal/obs"
	"github.com/idemkit/idem/internal/panics"
	"github.com/idemkit/idem/internal/sqlset"
	"github.com/idemkit/idem/store"
)

// Handler applies one message's effect using the caller's transaction tx.
// Returning an error rolls back the effect and the inbox record.
type Handler[TTx any] func(ctx context.Context, tx TTx, msg idem.Message) error

// Result reports what happened to one delivery.
type Result int

const (
	// Processed means the delivery was new and the handler ran.
	Processed Result = 1
	// Duplicate means the message was already recorded with the same
	// payload; the handler did not run. Acknowledge the delivery.
	Duplicate Result = 2
)

// String returns "processed" or "duplicate".
func (r Result) String() string {
	switch r {
	case Processed:
		return "processed"
	case Duplicate:
		return "duplicate"
	}
	return fmt.Sprintf("Result(%d)", int(r))
}

// Config configures an Inbox.
type Config struct {
	// Retention is how long a record is kept after it is received; the
	// retention GC deletes it afterwards. It must cover the longest replay
	// horizon (broker redelivery, operator redrive). Defaults to 7 days.
	Retention time.Duration
	// RetentionFor overrides Retention per consumer.
	RetentionFor map[string]time.Duration
	// Lease is the default lease of Claim. Defaults to 5 minutes.
	Lease time.Duration
	// Now returns the current time. Defaults to time.Now.
	Now func() time.Time
	// DisablePipelining turns off the one-round-trip begin+insert that
	// Process uses on drivers that pipeline (store.Driver.SupportsPipeline:
	// pgx). Its
	// only visible cost is an ERROR line in the PostgreSQL log when two
	// first deliveries race.
	DisablePipelining bool
	// Logger receives debug logs of duplicates and conflicts. Defaults to
	// slog.Default(). Records logged while a span is active carry trace_id and
	// span_id.
	Logger *slog.Logger
}

// Inbox records processed messages. It is safe for concurrent use.
type Inbox[TTx any] struct {
	d   store.Driver[TTx]
	cfg Config
	q   *sqlset.Inbox
	log *slog.Logger
}

// maxBatch bounds the rows of one multi-row insert.
const maxBatch = 500

// New returns an Inbox on d. The inbox table must exist (migrate.Up).
func New[TTx any](d store.Driver[TTx], cfg Config) (*Inbox[TTx], error) {
	if d == nil || d.Statements() == nil {
		return nil, checks.Optionf("inbox: nil driver or driver without statements")
	}
	cfg.Retention = cmp.Or(cfg.Retention, 7*24*time.Hour)
	cfg.Lease = cmp.Or(cfg.Lease, 5*time.Minute)
	if cfg.Retention < 0 || cfg.Lease < 0 {
		return nil, checks.Optionf("inbox: negative Retention or Lease")
	}
	for c, r := range cfg.RetentionFor {
		if r <= 0 {
			return nil, checks.Optionf("inbox: RetentionFor[%q] must be positive", c)
		}
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	return &Inbox[TTx]{d: d, cfg: cfg, q: &d.Statements().Inbox, log: obs.Component(cfg.Logger, "inbox")}, nil
}

// Driver returns the inbox's driver.
func (in *Inbox[TTx]) Driver() store.Driver[TTx] { return in.d }

func (in *Inbox[TTx]) retention(consumer string) time.Duration {
	if r, ok := in.cfg.RetentionFor[consumer]; ok {
		return r
	}
	return in.cfg.Retention
}

func validConsumer(consumer string) error {
	if err := checks.ID(consumer); err != nil {
		return fmt.Errorf("inbox: consumer: %w", err)
	}
	return nil
}

func validate(consumer string, msg idem.Message) error {
	if err := validConsumer(consumer); err != nil {
		return err
	}
	if err := checks.ID(msg.ID); err != nil {
		return fmt.Errorf("inbox: message id: %w", err)
	}
	return nil
}

// forOther reports whether msg is a dead-letter redrive or revision
// addressed to another consumer than consumer ([broker.ForOtherConsumer]),
// which consumer must acknowledge without processing: it applied the
// original already, or holds its own letter for it. A revision carries a
// new message id, so the inbox row alone would not stop it. It is logged
// at debug.
func (in *Inbox[TTx]) forOther(ctx context.Context, consumer string, msg idem.Message) bool {
	if !broker.ForOtherConsumer(msg, consumer) {
		return false
	}
	in.log.DebugContext(ctx, "redrive for another consumer skipped: not recorded, handler not run",
		"consumer", consumer, "message_id", msg.ID, "for", msg.Headers[broker.HeaderRedriveFor])
	return true
}

// admit checks what Process and ProcessTx are given; done reports that
// the message goes no further: an error for an invalid consumer, a nil
// handler or an invalid message id, or a Duplicate, with nothing recorded,
// for a redrive for another consumer.
func (in *Inbox[TTx]) admit(ctx context.Context, consumer string, msg idem.Message, h Handler[TTx]) (res Result, done bool, err error) {
	if err := validConsumer(consumer); err != nil {
		return 0, true, err
	}
	if h == nil {
		return 0, true, checks.Optionf("inbox: nil handler")
	}
	if in.forOther(ctx, consumer, msg) {
		return Duplicate, true, nil
	}
	if err := checks.ID(msg.ID); err != nil {
		return 0, true, fmt.Errorf("inbox: message id: %w", err)
	}
	return 0, false, nil
}

// ProcessTx records msg for consumer inside the caller's transaction tx and,
// if it is the first delivery, runs h with tx. The caller commits tx and only
// then acknowledges the broker.
//
//   - New message: returns (Processed, nil) after h succeeded.
//   - Duplicate with the same payload: returns (Duplicate, nil); h did not
//     run and nothing was written.
//   - A dead-letter redrive or revision for another consumer (its
//     broker.HeaderRedriveFor names another than consumer): returns
//     (Duplicate, nil); h did not run and nothing was written.
//   - Duplicate with another payload: returns an error matching
//     idem.ErrFingerprintMismatch; h did not run and nothing was written.
//   - A record held by a live Claim: idem.ErrInProgress; a record marked
//     failed by Fail: idem.ErrNeedsReconciliation.
//   - h fails: its error is returned unchanged and the caller must roll tx
//     back (the inbox row was written in tx), so the redelivery is processed.
//   - h panics: the panic is recovered, logged at ERROR with its stack and
//     returned as an *idem.PanicError (errors.Is idem.ErrPanic, class
//     "panic"), a failure like any other: the caller must roll tx back.
//
// On PostgreSQL, tx should be READ COMMITTED (the default); at REPEATABLE
// READ or SERIALIZABLE a concurrent duplicate surfaces as a serialization
// error (store.ErrSerialization) that the caller retries.
func (in *Inbox[TTx]) ProcessTx(ctx context.Context, tx TTx, consumer string, msg idem.Message, h Handler[TTx]) (Result, error) {
	if res, done, err := in.admit(ctx, consumer, msg, h); done {
		return res, err
	}
	return in.processTx(ctx, tx, consumer, msg, h)
}

// processTx is ProcessTx on a message admit let through.
func (in *Inbox[TTx]) processTx(ctx context.Context, tx TTx, consumer string, msg idem.Message, h Handler[TTx]) (Result, error) {
	h = in.recovering(consumer, h)
	q := in.d.Tx(tx)
	fp := msg.Fingerprint()
	now := in.cfg.Now()
	for attempt := 0; ; attempt++ {
		n, err := q.Exec(ctx, in.q.Insert, consumer, msg.ID, fp[:], store.Micros(now), store.Micros(now.Add(in.retention(consumer))))
		if err != nil {
			return 0, fmt.Errorf("inbox: record %s/%s: %w", consumer, msg.ID, err)
		}
		if n == 1 {
			if err := h(ctx, tx, msg); err != nil {
				return 0, err
			}
			return Processed, nil
		}
		// Not inserted: a committed row exists (at READ COMMITTED the insert
		// waited for any in-flight inserter). Read it in a new statement.
		rec, err := in.read(ctx, q, consumer, msg.ID)
		if errors.Is(err, store.ErrNoRows) {
			// The conflicting row was rolled back or deleted in between: try
			// the insert again.
			if attempt < 5 {
				continue
			}
			return 0, fmt.Errorf("inbox: %s/%s: record vanished repeatedly: %w", consumer, msg.ID, store.ErrSerialization)
		}
		if err != nil {
			return 0, err
		}
		if err := rec.check(consumer, msg.ID, fp); err != nil {
			return 0, err
		}
		in.log.DebugContext(ctx, "duplicate suppressed", "consumer", consumer, "message_id", msg.ID, "attempt", msg.Attempt)
		return Duplicate, nil
	}
}

// Process runs ProcessTx in a transaction of its own and commits it. A
// duplicate or an error rolls the transaction back. After Process returns
// (Processed or Duplicate, nil), acknowledge the delivery. A redrive for
// another consumer is a Duplicate without a transaction (see ProcessTx).
//
// With the pgx driver, a first delivery (msg.Attempt ≤ 1) begins the
// transaction and inserts the inbox row in one round trip; a unique
// violation there (a racing duplicate) falls back to the ordinary path.
func (in *Inbox[TTx]) Process(ctx context.Context, consumer string, msg idem.Message, h Handler[TTx]) (Result, error) {
	if res, done, err := in.admit(ctx, consumer, msg, h); done {
		return res, err
	}
	if in.d.SupportsPipeline() && msg.Attempt <= 1 && !in.cfg.DisablePipelining {
		fp := msg.Fingerprint()
		now := in.cfg.Now()
		tx, inserted, ok, err := in.d.BeginInsert(ctx, in.q.InsertStrict, consumer, msg.ID, fp[:], store.Micros(now), store.Micros(now.Add(in.retention(consumer))))
		if err != nil {
			return 0, fmt.Errorf("inbox: record %s/%s: %w", consumer, msg.ID, err)
		}
		if ok && inserted {
			if err := in.recovering(consumer, h)(ctx, tx, msg); err != nil {
				_ = in.d.Rollback(context.WithoutCancel(ctx), tx)
				return 0, err
			}
			if err := in.d.Commit(ctx, tx); err != nil {
				return 0, fmt.Errorf("inbox: commit %s/%s: %w", consumer, msg.ID, err)
			}
			return Processed, nil
		}
	}
	tx, err := in.d.Begin(ctx)
	if err != nil {
		return 0, fmt.Errorf("inbox: begin: %w", err)
	}
	res, err := in.processTx(ctx, tx, consumer, msg, h)
	if err != nil || res == Duplicate {
		_ = in.d.Rollback(context.WithoutCancel(ctx), tx)
		return res, err
	}
	if err := in.d.Commit(ctx, tx); err != nil {
		return 0, fmt.Errorf("inbox: commit %s/%s: %w", consumer, msg.ID, err)
	}
	return Processed, nil
}

// recovering returns h with its panics recovered as *idem.PanicError
// (see [idem.ErrPanic]), logged with their stack.
func (in *Inbox[TTx]) recovering(consumer string, h Handler[TTx]) Handler[TTx] {
	return func(ctx context.Context, tx TTx, msg idem.Message) error {
		return panics.Call(ctx, in.log, "handler panicked; its writes are rolled back and the message is not recorded",
			func() error { return h(ctx, tx, msg) }, "consumer", consumer, "message_id", msg.ID, "attempt", msg.Attempt)
	}
}

// record is a stored inbox row.
type record struct {
	fingerprint []byte
	state       string
	token       int64
	leaseUntil  int64
	attempts    int
}

func (in *Inbox[TTx]) read(ctx context.Context, q store.Querier, consumer, id string) (record, error) {
	var r record
	err := q.QueryRow(ctx, in.q.Select, consumer, id).Scan(&r.fingerprint, &r.state, &r.token, &r.leaseUntil, &r.attempts)
	return r, err
}

// check turns a stored record into the answer for a duplicate delivery.
// A record still in_progress answers idem.ErrInProgress whether or not its
// lease ended: only Claim takes an abandoned claim over.
func (r record) check(consumer, id string, fp idem.Fingerprint) error {
	if err := fpmatch.Check(consumer+"/"+id, r.fingerprint, fp); err != nil {
		return err
	}
	switch r.state {
	case lease.InProgress:
		return fmt.Errorf("inbox: %s/%s: %w", consumer, id, idem.ErrInProgress)
	case lease.Failed:
		return fmt.Errorf("inbox: %s/%s: %w", consumer, id, idem.ErrNeedsReconciliation)
	}
	return nil
}
