// Package outbox is idem's transactional outbox: a service writes its
// business change and the events about it in one database transaction, and a
// [Relay] gets every committed event to the broker at least once, in order per
// ordering key, with a stable message id that brokers and consumers dedup on.
//
// The event is written in the business transaction; the relay publishes
// it after the commit:
//
//	ob, err := outbox.New(d, outbox.Config{Source: "/shop"})
//	err = store.InTx(ctx, d, func(tx pgx.Tx) error {
//		if _, err := tx.Exec(ctx, `INSERT INTO orders (id) VALUES ($1)`, orderID); err != nil {
//			return err
//		}
//		_, err := ob.EnqueueTx(ctx, tx, outbox.Event{Type: "order.created", Topic: "orders", Key: orderID, Payload: body})
//		return err
//	})
//	relay, err := outbox.NewRelay(d, publisher, outbox.RelayConfig{}) // any broker.Publisher
//	err = idem.Run(ctx, relay) // with the service's other runners
//
// # Guarantees
//
//   - Atomic with the business change: [Outbox.EnqueueTx] inserts into the
//     caller's transaction. Roll it back and the events never existed; no
//     event of a rolled-back transaction is ever published.
//   - At least once: the relay marks an event published only after the
//     broker's durable ack. A crash between the ack and the mark publishes the
//     event again with the same id: the broker's dedup window (JetStream
//     Nats-Msg-Id) or the consumer's inbox absorbs the duplicate. So does
//     a PostgreSQL server crash that loses the relay's last marks (its
//     claim transactions do not wait for their WAL flush).
//   - No skipped late commits: the relay claims rows by state ('pending'),
//     never "everything after the last seq I saw", so a transaction that took
//     its seq first and commits last is still published.
//   - Per-key order: an event is never published while an earlier event of
//     the same non-empty ordering key is unpublished. On PostgreSQL Enqueue
//     takes a transaction-scoped advisory lock per ordering key, so
//     transactions enqueuing for the same key commit in seq order (set
//     Config.DisableKeyLock to opt out, then your own locking must ensure it).
//     A parked event blocks its key until it is retried ([Outbox.RetryParked])
//     or deleted by an operator.
//   - Never dropped: an event that fails Config.MaxAttempts times is parked
//     (a parked event is stored as failed, last_error kept), reported
//     through the relay's hooks and logs, and counted by [Outbox.Stats].
//
// # States
//
// The outbox table uses internal/lease's vocabulary: a pending event waits
// to be published (claimed by a relay or not), a published event is stored
// as completed and a parked event as failed. The API and the docs keep the
// names published and parked.
//
// # Identity
//
// Consumers dedup on CloudEvents source + id. Brokers dedup on the message
// id alone, so an event id must be unique by itself: the default UUIDv7 is.
//
// # Tracing
//
// Enqueue runs in an OpenTelemetry span idem.outbox.enqueue and stores its
// W3C context with each row (traceparent, tracestate: migration 0007); the
// relay publishes each event in an idem.relay.publish span that is a child
// of it and injects that span into the message's traceparent/tracestate
// headers, where the consumer's idem.consume span picks it up. So one
// request is one trace across the transaction, the relay and the broker.
package outbox

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"hash/fnv"
	"log/slog"
	"maps"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/google/uuid"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/internal/checks"
	"github.com/idemkit/idem/internal/fpmatch"
	"github.com/idemkit/idem/internal/lease"
	"github.com/idemkit/idem/internal/obs"
	"github.com/idemkit/idem/internal/operator"
	"github.com/idemkit/idem/internal/schemacheck"
	"github.com/idemkit/idem/internal/sqlset"
	"github.com/idemkit/idem/store"
)

const (
	// insertArgs is the number of arguments per event of
	// sqlset.Outbox.Insert.
	insertArgs = 13
	// maxRowsPerInsert bounds the bind variables of one INSERT (PostgreSQL:
	// 65535, SQLite: 32766).
	maxRowsPerInsert = 500
)

// lockKeys are the arguments of the outbox's advisory locks and the
// channel of its notifications, derived from the driver's table names so
// that two outboxes in one database (two schemas) never share them. Drivers
// without advisory locks or LISTEN never see them.
type lockKeys struct {
	space   int32  // key-lock namespace (two-int advisory lock space)
	relay   int64  // relays' lock (bigint advisory lock space)
	channel string // notification channel
}

func newLockKeys(names store.Names) lockKeys {
	h := fnv.New64a()
	h.Write([]byte("idem.outbox." + names.Schema + "." + names.Prefix))
	sum := h.Sum64()
	k := lockKeys{space: int32(sum >> 32), relay: int64(sum), channel: "idem_outbox_" + names.Schema}
	if len(k.channel) > 63 {
		k.channel = k.channel[:63]
	}
	return k
}

// seqsArg binds a list of seqs as the statements take it: a JSON array of
// integers.
func seqsArg(seqs []int64) string {
	var b strings.Builder
	b.WriteByte('[')
	for i, s := range seqs {
		if i > 0 {
			b.WriteByte(',')
		}
		b.WriteString(strconv.FormatInt(s, 10))
	}
	b.WriteByte(']')
	return b.String()
}

// Config configures an Outbox.
type Config struct {
	// Source is the CloudEvents source given to events that have none.
	// Defaults to "idem".
	Source string
	// DisableKeyLock skips the per-ordering-key advisory lock EnqueueTx
	// takes on PostgreSQL. Without it, two concurrent transactions enqueuing for
	// the same key may commit out of seq order and the relay may publish
	// the later one first. Defaults to false (lock taken). Ignored on SQLite,
	// where writers are serialized anyway.
	DisableKeyLock bool
	// DisableNotify skips the pg_notify Enqueue sends on PostgreSQL (it is
	// delivered only when the caller's transaction commits and wakes relays
	// listening on the same database). Defaults to false (notify sent).
	DisableNotify bool
	// NotifyInterval coalesces notifications: on PostgreSQL at most one
	// Enqueue per NotifyInterval (per Outbox) sends the pg_notify; the
	// others send none. Defaults to 5ms; negative notifies on every Enqueue.
	//
	// Why: PostgreSQL serializes the commits of transactions that notified
	// (a global lock taken at commit), so a notify per transaction stops
	// concurrent producers from overlapping their commits. The trade-off:
	// a transaction that did not notify relies on another wake-up. A relay
	// that was woken keeps re-checking shortly after (RelayConfig.Recheck,
	// doubling up to PollInterval), which catches transactions that commit
	// soon after the notifying one; one that commits later than that, or
	// whose notifying neighbour rolled back, waits at most the relay's
	// PollInterval. Correctness never depends on notifications.
	NotifyInterval time.Duration
	// Now returns the current time. Defaults to time.Now.
	Now func() time.Time
	// Logger receives debug logs. Defaults to slog.Default(). Records logged
	// while a span is active carry trace_id and span_id.
	Logger *slog.Logger
	// TracerProvider supplies the tracer of the idem.outbox.enqueue span.
	// Defaults to otel.GetTracerProvider() (no-op spans unless an
	// OpenTelemetry SDK is installed).
	TracerProvider trace.TracerProvider
}

// Outbox writes events in the caller's transaction and administers the
// outbox table. It is safe for concurrent use.
type Outbox[TTx any] struct {
	d    store.Driver[TTx]
	cfg  Config
	q    sqlset.Outbox
	keys lockKeys
	log  *slog.Logger
	tr   trace.Tracer

	epoch      time.Time    // monotonic origin of lastNotify
	lastNotify atomic.Int64 // ns since epoch of the last notifying Enqueue
}

// New returns an Outbox on d, whose database must be migrated (package
// migrate): New asks it (reading only) and returns an error wrapping
// migrate.ErrNotMigrated, which says to run `idem migrate up`, when it lacks
// migrations; a database that does not answer yet is not an error.
func New[TTx any](d store.Driver[TTx], cfg Config) (*Outbox[TTx], error) {
	if d == nil {
		return nil, checks.Optionf("outbox: nil driver")
	}
	cfg.Source = cmp.Or(cfg.Source, "idem")
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	cfg.NotifyInterval = cmp.Or(cfg.NotifyInterval, 5*time.Millisecond)
	if err := schemacheck.Ready(d); err != nil {
		return nil, fmt.Errorf("outbox: %w", err)
	}
	o := &Outbox[TTx]{d: d, cfg: cfg, q: d.Statements().Outbox, keys: newLockKeys(d.Names()), log: obs.Component(cfg.Logger, "idem.outbox"),
		tr: obs.Tracer(cfg.TracerProvider), epoch: time.Now()}
	o.lastNotify.Store(-int64(time.Hour))
	return o, nil
}

// EnqueueTx writes events in the caller's transaction tx and returns them with
// ID, Source, Time and Seq filled in. Nothing is visible to the relay until
// tx commits; if tx rolls back, the events never existed.
//
// Each event needs Type and Topic. An event whose (Source, ID) is already
// in the outbox (a retried enqueue with a caller-chosen id) is not written
// again: with the same type, topic and payload it is accepted as a
// duplicate (its Seq is 0 in the result); with different content Enqueue
// returns an error wrapping [idem.ErrFingerprintMismatch]. An event stays
// in the outbox until Prune removes it after its publication, or, with
// [RelayConfig.DeletePublished], until it is published: its id is new
// again from then on. Other errors leave tx in an unknown state: roll it
// back.
//
// On PostgreSQL EnqueueTx is one statement (one round trip): it takes the
// ordering-key locks (see Config.DisableKeyLock) before inserting, inserts
// the rows and, at most once per Config.NotifyInterval, queues a pg_notify
// that wakes listening relays after commit. A single event without a key
// whose call sends no notify is the plain one-row INSERT (the same
// ON CONFLICT dedup), which costs the database less than the statement
// that folds locks and notify in. On SQLite call [Relay.Notify]
// after commit for an immediate wake-up, otherwise the relay polls.
//
// Tracing: Enqueue runs in an idem.outbox.enqueue span (a child of the
// span in ctx) whose W3C context is stored with each row (Event.TraceParent,
// migration 0007), so the relay publishes every event in a child span of
// it. Called from a handler of idem's consumer runtime, Enqueue copies the
// consumed message's id into the [HeaderCausation] header.
func (o *Outbox[TTx]) EnqueueTx(ctx context.Context, tx TTx, events ...Event) (_ []Event, err error) {
	if len(events) == 0 {
		return nil, nil
	}
	ctx, span := o.tr.Start(ctx, obs.SpanOutboxEnqueue, trace.WithSpanKind(trace.SpanKindInternal))
	defer func() {
		if span.IsRecording() {
			span.SetAttributes(obs.AttrEventCount.Int(len(events)))
			if len(events) == 1 {
				span.SetAttributes(attribute.String("idem.event.type", events[0].Type), obs.AttrTopic.String(events[0].Topic))
			}
		}
		obs.End(span, err)
	}()
	traceparent, tracestate := obs.Current(ctx)
	causation := obs.Causation(ctx)
	now := o.cfg.Now()
	out := make([]Event, len(events))
	anyKey := false
	for i, e := range events {
		if e.ID == "" {
			u, err := uuid.NewV7()
			if err != nil {
				return nil, fmt.Errorf("outbox: new id: %w", err)
			}
			e.ID = u.String()
		}
		e.Source = cmp.Or(e.Source, o.cfg.Source)
		if e.Time.IsZero() {
			e.Time = now
		}
		if err := validate(e); err != nil {
			return nil, err
		}
		e.Seq, e.Attempts = 0, 0
		if e.TraceParent == "" {
			e.TraceParent, e.TraceState = traceparent, tracestate
		}
		if _, ok := e.Headers[HeaderCausation]; causation != "" && !ok {
			h := make(map[string]string, len(e.Headers)+1)
			maps.Copy(h, e.Headers)
			h[HeaderCausation] = causation
			e.Headers = h
		}
		out[i] = e
		anyKey = anyKey || e.Key != ""
	}
	q := o.d.Tx(tx)
	seqs := make(map[ident]int64, len(out))
	if o.q.Enqueue != "" {
		lockKeys := anyKey && !o.cfg.DisableKeyLock
		notify := o.notifyNow()
		switch {
		case len(out) == 1 && !lockKeys && !notify:
			// Nothing to fold in: the plain one-row INSERT (the same
			// ON CONFLICT dedup) skips the arrays' encoding and unnest.
			err = o.insertChunks(ctx, q, out, now, seqs)
		case len(out) == 1 && o.q.EnqueueOne != "":
			// The key lock or the notify folded into a one-row INSERT.
			err = o.insertOne(ctx, q, out[0], now, lockKeys, notify, seqs)
		default:
			err = o.insertArrays(ctx, q, out, now, lockKeys, notify, seqs)
		}
	} else {
		err = o.insertChunks(ctx, q, out, now, seqs)
	}
	if err != nil {
		return nil, err
	}
	for i := range out {
		seq, ok := seqs[ident{out[i].Source, out[i].ID}]
		if ok {
			out[i].Seq = seq
			continue
		}
		if err := o.resolveDuplicate(ctx, q, &out[i], now, seqs); err != nil {
			return nil, err
		}
	}
	return out, nil
}

// resolveDuplicate settles an event the insert did not write: its (source,
// id) exists, committed (READ COMMITTED: ON CONFLICT DO NOTHING waited for
// the conflicting transaction) or written earlier in this transaction, so
// the contents are compared. The row may be gone by the time it is read
// again: a relay with RelayConfig.DeletePublished deleted it once
// published (on PostgreSQL nothing locks a row ON CONFLICT DO NOTHING
// skipped). The id is then free, as for an enqueue after the delete, and
// the event is queued anew (e.Seq set); should that insert meet yet
// another row, that row's contents are compared.
func (o *Outbox[TTx]) resolveDuplicate(ctx context.Context, q store.Querier, e *Event, now time.Time, seqs map[ident]int64) error {
	err := o.compareExisting(ctx, q, *e)
	if !errors.Is(err, store.ErrNoRows) {
		return err
	}
	if err := o.insertChunks(ctx, q, []Event{*e}, now, seqs); err != nil {
		return err
	}
	if seq, ok := seqs[ident{e.Source, e.ID}]; ok {
		e.Seq = seq
		return nil
	}
	return o.compareExisting(ctx, q, *e)
}

type ident struct{ source, id string }

// insertOne writes one event with sqlset.Outbox.EnqueueOne: its key lock
// when lockKeys, the row, and the pg_notify when notify.
func (o *Outbox[TTx]) insertOne(ctx context.Context, q store.Querier, e Event, now time.Time, lockKeys, notify bool, seqs map[ident]int64) error {
	args, err := rowArgs(make([]any, 0, insertArgs+4), e, now)
	if err != nil {
		return err
	}
	rows, err := q.Query(ctx, o.q.EnqueueOne, append(args, o.keys.space, lockKeys, o.keys.channel, notify)...)
	if err != nil {
		return fmt.Errorf("outbox: insert: %w", err)
	}
	return scanInserted(rows, seqs)
}

// insertArrays writes out in one statement (one round trip): the key locks
// when lockKeys, the rows, and the pg_notify when notify (see
// sqlset.Outbox.Enqueue and Config.NotifyInterval).
func (o *Outbox[TTx]) insertArrays(ctx context.Context, q store.Querier, out []Event, now time.Time, lockKeys, notify bool, seqs map[ident]int64) error {
	n := len(out)
	src, id, typ, topic, subj, ct, key, hdr := make([]string, n), make([]string, n), make([]string, n),
		make([]string, n), make([]string, n), make([]string, n), make([]string, n), make([]string, n)
	tp, ts := make([]string, n), make([]string, n)
	tm := make([]int64, n)
	payload := make([][]byte, n)
	for i, e := range out {
		h, err := headersJSON(e)
		if err != nil {
			return err
		}
		src[i], id[i], typ[i], topic[i], subj[i], tm[i], ct[i], key[i], hdr[i], payload[i], tp[i], ts[i] =
			e.Source, e.ID, e.Type, e.Topic, e.Subject, store.Micros(e.Time), e.DataContentType, e.Key, h, e.Payload, e.TraceParent, e.TraceState
		if payload[i] == nil {
			payload[i] = []byte{}
		}
	}
	rows, err := q.Query(ctx, o.q.Enqueue, src, id, typ, topic, subj, tm, ct, key, hdr, payload,
		store.Micros(now), o.keys.space, lockKeys, o.keys.channel, notify, tp, ts)
	if err != nil {
		return fmt.Errorf("outbox: insert: %w", err)
	}
	return scanInserted(rows, seqs)
}

// insertChunks writes out with multi-row INSERTs: where the dialect has no
// one-statement Enqueue (SQLite), and for a single event that needs no key
// lock and no notify.
func (o *Outbox[TTx]) insertChunks(ctx context.Context, q store.Querier, out []Event, now time.Time, seqs map[ident]int64) error {
	for start := 0; start < len(out); start += maxRowsPerInsert {
		chunk := out[start:min(start+maxRowsPerInsert, len(out))]
		args := make([]any, 0, len(chunk)*insertArgs)
		for _, e := range chunk {
			var err error
			if args, err = rowArgs(args, e, now); err != nil {
				return err
			}
		}
		rows, err := q.Query(ctx, o.q.Insert(len(chunk)), args...)
		if err != nil {
			return fmt.Errorf("outbox: insert: %w", err)
		}
		if err := scanInserted(rows, seqs); err != nil {
			return err
		}
	}
	return nil
}

// rowArgs appends the insertArgs arguments of e's row (sqlset.Outbox.Insert's
// order) to args.
func rowArgs(args []any, e Event, now time.Time) ([]any, error) {
	h, err := headersJSON(e)
	if err != nil {
		return nil, err
	}
	payload := e.Payload
	if payload == nil {
		payload = []byte{}
	}
	return append(args, e.Source, e.ID, e.Type, e.Topic, e.Subject, store.Micros(e.Time),
		e.DataContentType, e.Key, h, payload, store.Micros(now), e.TraceParent, e.TraceState), nil
}

func scanInserted(rows store.Rows, seqs map[ident]int64) error {
	defer rows.Close()
	for rows.Next() {
		var id ident
		var seq int64
		if err := rows.Scan(&id.source, &id.id, &seq); err != nil {
			return fmt.Errorf("outbox: insert: %w", err)
		}
		seqs[id] = seq
	}
	if err := rows.Err(); err != nil {
		return fmt.Errorf("outbox: insert: %w", err)
	}
	return nil
}

func headersJSON(e Event) (string, error) {
	if e.Headers == nil {
		return "{}", nil
	}
	h, err := json.Marshal(e.Headers)
	if err != nil {
		return "", fmt.Errorf("outbox: headers of %s: %w", e.ID, err)
	}
	return string(h), nil
}

// notifyNow reports whether this Enqueue should send the pg_notify: at most
// one Enqueue per NotifyInterval does (see Config.NotifyInterval).
func (o *Outbox[TTx]) notifyNow() bool {
	switch {
	case o.cfg.DisableNotify:
		return false
	case o.cfg.NotifyInterval < 0:
		return true
	}
	now := int64(time.Since(o.epoch))
	last := o.lastNotify.Load()
	if now-last < int64(o.cfg.NotifyInterval) {
		return false
	}
	return o.lastNotify.CompareAndSwap(last, now)
}

func (o *Outbox[TTx]) compareExisting(ctx context.Context, q store.Querier, e Event) error {
	var typ, topic string
	var payload []byte
	err := q.QueryRow(ctx, o.q.Existing, e.Source, e.ID).Scan(&typ, &topic, &payload)
	if err != nil {
		return fmt.Errorf("outbox: re-read duplicate event %s/%s: %w", e.Source, e.ID, err)
	}
	// The payloads are compared as canonical JSON, like the inbox's, so a
	// retried EnqueueTx whose JSON keys come in another order is the same
	// event; type and topic are part of the fingerprint, so a mismatch on
	// them shows two different fingerprints too.
	stored := eventFingerprint(typ, topic, payload)
	if err := fpmatch.Check(e.Source+"/"+e.ID, stored[:], eventFingerprint(e.Type, e.Topic, e.Payload)); err != nil {
		return err
	}
	o.log.DebugContext(ctx, "duplicate enqueue ignored", "source", e.Source, "event_id", e.ID)
	return nil
}

// eventFingerprint is what a duplicate EnqueueTx must repeat: the type, the
// topic and the payload as canonical JSON (raw bytes when it is not JSON).
func eventFingerprint(typ, topic string, payload []byte) idem.Fingerprint {
	p := fpmatch.Payload(payload)
	return idem.FingerprintOf([]byte(typ), []byte(topic), p[:])
}

// MaxOrderingKeyLen is the longest ordering key (Event.Key) the outbox
// stores, in bytes: what MySQL's ordering_key columns hold (VARBINARY,
// indexed). A longer key is refused with idem.ErrInvalidInput.
const MaxOrderingKeyLen = 1024

func validate(e Event) error {
	if err := checks.ID(e.ID); err != nil {
		return fmt.Errorf("outbox: event id: %w", err)
	}
	switch {
	case len(e.Source) > idem.MaxKeyLen:
		return fmt.Errorf("%w: outbox: source of %d bytes", idem.ErrInvalidInput, len(e.Source))
	case len(e.Key) > MaxOrderingKeyLen:
		return fmt.Errorf("%w: outbox: event %s has an ordering key of %d bytes, over %d", idem.ErrInvalidInput, e.ID, len(e.Key), MaxOrderingKeyLen)
	case e.Type == "":
		return fmt.Errorf("%w: outbox: event %s has no type", idem.ErrInvalidInput, e.ID)
	case e.Topic == "":
		return fmt.Errorf("%w: outbox: event %s has no topic", idem.ErrInvalidInput, e.ID)
	}
	return nil
}

// Prune deletes published events whose published_at is older than
// olderThan, batch rows per statement (defaults to 1000 when ≤ 0), until
// none are left, and returns how many it deleted. Pending and parked events
// are never deleted. Safe to run while relays run.
func (o *Outbox[TTx]) Prune(ctx context.Context, olderThan time.Duration, batch int) (int64, error) {
	if batch <= 0 {
		batch = 1000
	}
	horizon := o.cfg.Now().Add(-olderThan)
	var total int64
	for {
		n, err := operator.OutboxExpire(ctx, o.d, horizon, batch)
		total += n
		if err != nil {
			return total, fmt.Errorf("outbox: prune: %w", err)
		}
		if n < int64(batch) {
			return total, nil
		}
	}
}

// RetryParked moves parked events (all of them, or only those with the
// given seqs) back to pending with their attempts reset, and returns how
// many it moved. Their keys are unblocked once they are published.
func (o *Outbox[TTx]) RetryParked(ctx context.Context, seqs ...int64) (int64, error) {
	var n int64
	err := o.inSharedTx(ctx, func(q store.Querier) error {
		var err error
		if len(seqs) == 0 {
			n, err = q.Exec(ctx, o.q.RetryParked)
		} else {
			n, err = q.Exec(ctx, o.q.RetryParkedSeqs, seqsArg(seqs))
		}
		return err
	})
	if err != nil {
		return 0, fmt.Errorf("outbox: retry parked: %w", err)
	}
	return n, nil
}

// inSharedTx runs fn in a transaction holding the relays' shared lock
// (sqlset.Outbox.LockShared) where the dialect has one, so that fn never
// interleaves with a relay's claim or settle of the same rows.
func (o *Outbox[TTx]) inSharedTx(ctx context.Context, fn func(q store.Querier) error) error {
	return store.InTx(ctx, o.d, func(tx TTx) error {
		q := o.d.Tx(tx)
		if o.q.LockShared != "" {
			if _, err := q.Exec(ctx, o.q.LockShared, o.keys.relay); err != nil {
				return err
			}
		}
		return fn(q)
	})
}

// Stats is a snapshot of the outbox.
type Stats struct {
	Pending       int64         // events not yet published (including claimed ones)
	Parked        int64         // events that exhausted their attempts
	OldestPending time.Time     // created_at of the oldest pending event; zero if none
	Lag           time.Duration // age of the oldest pending event (outbox lag); 0 if none
}

// Stats counts pending and parked events and measures the outbox lag.
func (o *Outbox[TTx]) Stats(ctx context.Context) (Stats, error) {
	var s Stats
	b, err := operator.OutboxBacklog(ctx, o.d, o.cfg.Now())
	if err != nil {
		return s, err
	}
	s.Pending, s.OldestPending, s.Lag = b.Pending, b.OldestAt, b.Oldest
	if err := o.d.Pool().QueryRow(ctx, o.q.CountState, lease.Failed).Scan(&s.Parked); err != nil {
		return s, fmt.Errorf("outbox: stats: %w", err)
	}
	return s, nil
}

func sortBySeq(evs []Event) {
	slices.SortFunc(evs, func(a, b Event) int { return cmp.Compare(a.Seq, b.Seq) })
}
