// Package consumer runs idempotent consumers end to end: a worker pulls
// deliveries from a broker.Subscriber, processes each through the inbox in
// the handler's own transaction, acknowledges only after the commit,
// retries transient failures with exponential backoff and full jitter, and
// parks poison messages in the dead-letter store.
//
//	ib, err := inbox.New(d, inbox.Config{})
//	c, err := consumer.New(ib, subscriber, consumer.Config[pgx.Tx]{
//		Name: "billing", // the inbox scope: one record per (Name, message id)
//		Handler: func(ctx context.Context, tx pgx.Tx, msg idem.Message) error {
//			_, err := tx.Exec(ctx, `INSERT INTO invoices (order_id) VALUES ($1)`, msg.Key)
//			return err // idem.Permanent(err) dead-letters at once; other errors are retried
//		},
//	})
//	err = idem.Run(ctx, c, relay) // acks after commit; poison messages go to the dead-letter store
//
// What happens to a delivery:
//
//   - new message, handler succeeds: inbox row + effect commit together,
//     then Ack. A crash between commit and Ack leads to a redelivery that
//     the inbox recognises as a duplicate: acked without running the
//     handler again.
//   - duplicate (same id, same payload): Ack without running the handler.
//   - a dead-letter redrive or revision addressed to another consumer
//     (header broker.HeaderRedriveFor, set by dlq.Store.Redrive and
//     dlq.Store.Revise): Ack without an inbox row or a handler run.
//   - same id with a different payload (idem.ErrFingerprintMismatch),
//     idem.Permanent errors, idem.ErrInvalidInput, undecodable payloads or
//     payloads Config.Validate refuses: nothing is committed; the message
//     is parked in the dead-letter store (its own transaction), then Term.
//   - no usable message id (the producer set none, e.g. a plain JetStream
//     publish without Nats-Msg-Id, and Config.MessageID is not set): the
//     handler never runs; the message is parked under an id made of the
//     broker's coordinates ("no-id:<subject>@<position>") with an error
//     wrapping ErrNoMessageID that says how to set Config.MessageID,
//     counted in idem_messages_unidentified_total, logged at ERROR, then
//     Term.
//   - the handler panics: the panic is recovered and logged at ERROR with
//     its stack; it is an error of class "panic" (idem.ErrPanic), handled
//     as the next case (counted in idem_messages_failed_total and, once
//     parked, idem_dead_letters_total with class="panic"). The process
//     goes on serving the other messages. A panic of Config.MessageID is
//     a permanent failure, as its errors are.
//   - any other error: the transaction rolls back and the delivery is
//     negatively acknowledged with a backoff delay (broker-native, e.g.
//     JetStream NakWithDelay); once msg.Attempt reaches MaxAttempts it is
//     parked instead.
//   - parking fails (database down): Nak, so the message is never lost.
//   - with Config.Reroute (non-blocking retry topics, consumer/retrytopic):
//     a failure is published to the next stage (a retry topic, finally the
//     dead-letter topic) and the delivery is acked once the broker durably
//     has it; if that publish fails, Nak with backoff.
//   - with Config.RetryInPlace (blocking retries): a transient failure is
//     retried in place with backoff, the subscription paused, so the
//     messages behind it wait (per-key order kept); out of attempts it is
//     parked as above.
//   - with Config.Gate (backpressure): while the gate is closed nothing is
//     fetched and the subscription is paused (broker.Pauser).
//
// Unless RetryInPlace is set, a poison message never blocks the messages
// behind it: each delivery is settled on its own, and the broker keeps
// delivering the others while one waits for its retry.
package consumer

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"runtime/debug"
	"sync"
	"time"

	"go.opentelemetry.io/otel/trace"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/broker"
	"github.com/idemkit/idem/dlq"
	"github.com/idemkit/idem/inbox"
	"github.com/idemkit/idem/internal/checks"
	"github.com/idemkit/idem/internal/obs"
	"github.com/idemkit/idem/internal/panics"
	"github.com/idemkit/idem/store"
)

// Backoff is an exponential backoff with full jitter: the delay before
// retry n (n = the failed delivery's attempt, 1-based) is uniformly random
// in [0, min(Max, Base·2^(n-1))]. It is idem.Backoff, idem's one backoff;
// the consumer's defaults are Base 1s, Max 1 minute.
type Backoff = idem.Backoff

// Hooks are test and drill seams.
type Hooks struct {
	// AfterCommit runs after a message's transaction committed and before
	// its Ack: concurrently for the messages of a batch, or one after the
	// other before the batch's single AckBatch when the subscriber is a
	// broker.BatchAcker. Returning an error skips the Ack, as if the process crashed
	// there: the broker redelivers the message after its ack wait. A panic
	// is recovered and logged with its stack, and the delivery is acked as
	// when the hook returns nil: the message is committed.
	AfterCommit func(msg idem.Message) error
}

// Config configures a Consumer.
type Config[TTx any] struct {
	// Name is the consumer name, the inbox scope: (Name, message id) is
	// the dedup identity. Required.
	Name string
	// MessageID, if set, derives the inbox identity from a delivery, e.g.
	// the business key "invoice:<orderId>" decoded from the payload, so
	// that two events announcing one intent under different ids still have
	// one effect. The handler receives the message with that ID. An error
	// is permanent: the delivery is dead-lettered. Defaults to the broker's
	// message id.
	//
	// Set it when the producer does not set a stable message id (it is not
	// an idem publisher): a plain JetStream publish carries no
	// Nats-Msg-Id, a Kafka record no idem-id header, an AMQP message no
	// message-id. Without MessageID such a message has no identity to
	// dedup on, so it is never processed: it is dead-lettered at once
	// (error wrapping [ErrNoMessageID], class invalid_input) under the
	// synthesized id "no-id:<subject>@<position>" ([dlq.SyntheticID], the
	// broker's coordinates: JetStream subject and stream sequence, Kafka
	// topic and partition/offset, AMQP routing key and delivery tag; hashed
	// when too long), counted in idem_messages_unidentified_total, logged
	// at ERROR and terminated so it is not redelivered. It then shows in
	// `idem dlq list` and in the parked letters of `idem stats`. A
	// redelivery of the same message (its Term was lost) updates the same
	// letter, except on AMQP, whose delivery tags are not stable: there it
	// may be parked twice. The same happens when MessageID fails on a
	// message that has no broker id either. Redriving such a letter
	// republishes the message with the synthesized id, under which it is
	// then processed once.
	MessageID func(msg idem.Message) (string, error)
	// Handler applies a message's effect with the transaction tx. Required.
	// Return idem.Permanent(err) for failures a retry cannot fix. In a
	// batch (BatchSize above 1), writes made through inbox.Exec with the
	// handler's ctx are queued and sent together with the batch's next
	// round trip instead of one round trip each (see inbox.Exec).
	Handler inbox.Handler[TTx]
	// BatchHandler, when set, applies the new messages of a fetched batch
	// (BatchSize above 1) in one call with the batch's transaction
	// (inbox.ProcessBatchWithTx), typically one multi-row statement instead
	// of a round trip per message. If it fails, its writes are rolled back
	// and each message is applied through Handler in a savepoint of its
	// own, so both must have the same effect for a message. A statement
	// written through inbox.Exec travels with the release of the batch's
	// savepoint. Optional.
	BatchHandler inbox.BatchHandler[TTx]
	// Concurrency is the number of worker goroutines, each fetching and
	// processing its own deliveries. Defaults to 1.
	Concurrency int
	// BatchSize is the most deliveries fetched at once: a fetch returns
	// once a delivery is available, with what is available up to
	// BatchSize (it does not wait for a full batch). Above 1 a fetched
	// batch is processed in one transaction with inbox.ProcessBatchTx (each
	// message in a savepoint). Defaults to 1.
	BatchSize int
	// FetchWait bounds one Fetch's wait for messages. Defaults to 1s.
	FetchWait time.Duration
	// MaxAttempts parks a message whose delivery attempt reached it and
	// still failed transiently. Defaults to 5. It must not exceed a limit
	// the broker puts on deliveries, or a message failing that often is
	// given up by the broker, not dead-lettered here: New refuses a
	// subscriber reporting a lower one (broker.DeliveryLimiter: JetStream's
	// MaxDeliver). A RabbitMQ quorum queue's delivery-limit (20 by default
	// since RabbitMQ 4) is not reported: keep MaxAttempts at or below it.
	MaxAttempts int
	// Backoff is the retry delay policy. Defaults to Base 1s, Max 1m.
	Backoff Backoff
	// DLQ is the dead-letter store. Defaults to dlq.New on the consumer's
	// driver.
	DLQ *dlq.Store[TTx]
	// Validate, if set, checks every payload before the handler runs (a
	// JSON Schema validator, a protobuf decode, ...); a payload it refuses
	// is dead-lettered as idem.ErrInvalidInput with its error as the
	// reason, and nothing is committed. A payload it panics on is
	// dead-lettered too, class "panic", and the consumer goes on.
	Validate func(payload []byte) error
	// Observer, if set, receives processed / duplicate / conflict / failure
	// / retry / dead-letter counts, in-flight and handler duration; pass
	// an *idemmetrics.Metrics. A panic of one of its methods is recovered
	// and logged with its stack; the delivery is settled as without it.
	Observer idem.Observer
	// Logger receives warnings (retries, dead letters, failed acks) and
	// errors (a message without a usable id, a dead letter that could not
	// be stored and is retried). Defaults to slog.Default(), so a dead
	// letter is never silent.
	Logger *slog.Logger
	// TracerProvider supplies the tracer of the idem.consume span opened
	// per delivery: a child of the traceparent in the message's headers,
	// with idem.consumer, idem.message_id and idem.decision (processed,
	// duplicate, mismatch, dead_lettered, retry); the handler runs under
	// it. Defaults to otel.GetTracerProvider().
	TracerProvider trace.TracerProvider
	// Hooks are seams for tests and drills.
	Hooks Hooks
	// StreamMaxAge declares how long the broker keeps, and may redeliver,
	// the subscription's messages. 0 reads it from the subscriber when it
	// implements horizon.StreamReporter (JetStream: the stream config's
	// MaxAge; a stream without one is not checked, since acknowledged
	// messages are only redelivered when the consumer is reset) and leaves
	// it unchecked otherwise; horizon.Unlimited declares no end. Run refuses
	// to start when the inbox retention of Name is shorter (a
	// [RetentionError]), since a message redelivered after its record was
	// collected would be processed again.
	StreamMaxAge time.Duration
	// AcceptShortRetention starts the consumer anyway when its inbox
	// retention is shorter than the stream's max age, with a warning.
	AcceptShortRetention bool
	// Reroute, if set, takes over failed deliveries instead of the
	// broker's redelivery (non-blocking retries): consumer/retrytopic
	// publishes each to the next retry topic or to the dead-letter topic,
	// and the delivery is acked only after that publish was durably
	// accepted. See [Rerouter]. A panic of Reroute is recovered, logged
	// with its stack, and handled as an error of Reroute.
	Reroute Rerouter
	// RetryInPlace (blocking retries) retries a transient failure in place,
	// waiting Backoff between attempts, up to MaxAttempts, while the
	// subscription is paused (when the subscriber is a broker.Pauser), so
	// the messages behind it wait: for consumers whose per-key order
	// matters. It requires Concurrency 1 and BatchSize 1 (with more, other
	// workers would handle the messages behind it meanwhile). The delivery
	// stays unacknowledged while it is retried: keep the retries' total
	// wait below the subscription's ack wait, or the broker redelivers it
	// meanwhile (the inbox then suppresses whichever copy comes second).
	RetryInPlace bool
	// Gate, if set, is consulted before every fetch (backpressure): while
	// it answers closed, the consumer fetches nothing, pauses the
	// subscription (when the subscriber is a broker.Pauser) and asks again
	// after retryAfter (bounded by FetchWait); once open it resumes. Use
	// effect.Worker.Gate: closed while a kind's breaker is open or its
	// rate limit is saturated.
	Gate func() (open bool, retryAfter time.Duration)
}

// Consumer binds a broker subscription to the inbox. It is safe to run
// several Consumers (in one or many processes) with the same Name on the
// same subscription: the inbox's unique key lets exactly one commit the
// effect of a message.
type Consumer[TTx any] struct {
	d   store.Driver[TTx]
	ib  *inbox.Inbox[TTx]
	sub broker.Subscriber
	cfg Config[TTx]
	log *slog.Logger
	tr  trace.Tracer

	mu      sync.Mutex
	running bool // protected by mu

	pause pauseHold // the holders of the subscription's pause
}

// New validates cfg and returns a consumer of sub recording messages in ib
// (on ib's driver, which also holds the default dead-letter store); call
// Run.
func New[TTx any](ib *inbox.Inbox[TTx], sub broker.Subscriber, cfg Config[TTx]) (*Consumer[TTx], error) {
	switch {
	case ib == nil || sub == nil:
		return nil, checks.Optionf("consumer: nil inbox or subscriber")
	case cfg.Handler == nil:
		return nil, checks.Optionf("consumer: nil Handler")
	case cfg.Concurrency < 0 || cfg.BatchSize < 0 || cfg.MaxAttempts < 0 || cfg.FetchWait < 0 ||
		cfg.Backoff.Base < 0 || cfg.Backoff.Max < 0:
		return nil, checks.Optionf("consumer: negative Concurrency, BatchSize, MaxAttempts, FetchWait or Backoff")
	case cfg.RetryInPlace && (cfg.Concurrency > 1 || cfg.BatchSize > 1):
		return nil, checks.Optionf("consumer: RetryInPlace needs Concurrency 1 and BatchSize 1, or messages behind a retried one are handled meanwhile")
	}
	if err := checks.ID(cfg.Name); err != nil {
		return nil, checks.Optionf("consumer: Name: %v", err)
	}
	cfg.Concurrency = max(cfg.Concurrency, 1)
	cfg.BatchSize = max(cfg.BatchSize, 1)
	if cfg.FetchWait == 0 {
		cfg.FetchWait = time.Second
	}
	if cfg.MaxAttempts == 0 {
		cfg.MaxAttempts = 5
	}
	if l, ok := sub.(broker.DeliveryLimiter); ok {
		if n := l.MaxDeliveries(); n > 0 && n < cfg.MaxAttempts {
			return nil, checks.Optionf("consumer: the subscriber's broker stops redelivering a message after %d deliveries, fewer than MaxAttempts %d: a message failing %d times would be neither processed nor dead-lettered; raise the broker's limit (JetStream MaxDeliver) or lower MaxAttempts", n, cfg.MaxAttempts, n)
		}
	}
	if cfg.Backoff.Base == 0 {
		cfg.Backoff.Base = time.Second
	}
	if cfg.Backoff.Max == 0 {
		cfg.Backoff.Max = time.Minute
	}
	if cfg.Backoff.Max < cfg.Backoff.Base {
		return nil, checks.Optionf("consumer: Backoff.Max %s below Base %s", cfg.Backoff.Max, cfg.Backoff.Base)
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	cfg.Observer = obs.Observer(cfg.Observer)
	d := ib.Driver()
	if cfg.DLQ == nil {
		s, err := dlq.New(d, dlq.Config{Logger: cfg.Logger})
		if err != nil {
			return nil, err
		}
		cfg.DLQ = s
	}
	c := &Consumer[TTx]{d: d, ib: ib, sub: sub, cfg: cfg, log: obs.Component(cfg.Logger, "consumer", "consumer", cfg.Name),
		tr: obs.Tracer(cfg.TracerProvider)}
	// User code called from the worker goroutines, where a panic would
	// kill the process.
	if _, nop := cfg.Observer.(obs.NopObserver); !nop {
		c.cfg.Observer = safeObserver{Observer: cfg.Observer, log: c.log}
	}
	if cfg.Reroute != nil {
		c.cfg.Reroute = safeRerouter{Rerouter: cfg.Reroute, name: cfg.Name, log: c.log}
	}
	c.pause.p, _ = sub.(broker.Pauser)
	return c, nil
}

// Run fetches and processes deliveries with Concurrency workers until ctx
// is done (after checking the replay horizons: an inbox retention shorter
// than the stream's max age is a [RetentionError], see
// Config.StreamMaxAge), then returns nil after every worker has settled (or abandoned to
// redelivery) its current deliveries. Fetch errors (broker outage) are
// logged and retried with backoff; a closed subscriber (broker.ErrClosed)
// ends Run with that error. Run may be called once at a time.
func (c *Consumer[TTx]) Run(ctx context.Context) error {
	c.mu.Lock()
	if c.running {
		c.mu.Unlock()
		return errors.New("consumer: already running")
	}
	c.running = true
	c.mu.Unlock()
	defer func() {
		c.mu.Lock()
		c.running = false
		c.mu.Unlock()
	}()
	if err := c.checkRetention(ctx); err != nil {
		return err
	}
	recordLater, err := c.recordRetention(ctx)
	if err != nil {
		return err
	}

	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	var wg sync.WaitGroup
	if recordLater {
		wg.Go(func() { c.recordRetentionLater(ctx) })
	}
	for range c.cfg.Concurrency {
		wg.Go(func() {
			if err := c.work(ctx); err != nil {
				cancel(err)
			}
		})
	}
	wg.Wait()
	if err := context.Cause(ctx); err != nil && !errors.Is(err, context.Canceled) && !errors.Is(err, context.DeadlineExceeded) {
		return err
	}
	return nil
}

func (c *Consumer[TTx]) work(ctx context.Context) error {
	failures := 0
	gated := false
	defer func() { c.ungate(ctx, &gated) }()
	for ctx.Err() == nil {
		if c.gated(ctx, &gated) {
			continue
		}
		ds, err := c.sub.Fetch(ctx, c.cfg.BatchSize, c.cfg.FetchWait)
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			if errors.Is(err, broker.ErrClosed) {
				return fmt.Errorf("consumer %s: %w", c.cfg.Name, err)
			}
			failures++
			delay := c.cfg.Backoff.Delay(failures, nil)
			c.log.WarnContext(ctx, "fetch failed; retrying", "error", err, "delay", delay)
			sleep(ctx, delay)
			continue
		}
		failures = 0
		if len(ds) == 0 {
			continue
		}
		c.Process(ctx, ds)
	}
	return nil
}

func sleep(ctx context.Context, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
	case <-t.C:
	}
}

// Process processes and settles (Ack, Nak or Term) deliveries fetched by
// the caller: one by one when there is one or BatchSize is 1, otherwise as
// one inbox batch. Run calls it; it is exported for callers driving their
// own fetch loop.
func (c *Consumer[TTx]) Process(ctx context.Context, ds []broker.Delivery) {
	if ds = c.skipForOthers(ctx, ds); len(ds) == 0 {
		return
	}
	if len(ds) == 1 || c.cfg.BatchSize == 1 {
		for _, dv := range ds {
			c.processOne(ctx, dv)
		}
		return
	}
	c.processBatch(ctx, ds)
}

// msgPanicked is the ERROR line of a handler's panic.
const msgPanicked = "handler panicked; its writes are rolled back and the message is retried"

// handler wraps the user's handler with metrics and tracing. A panic is
// recovered (panics.Call): logged with its stack, it is the attempt's
// error, class "panic".
func (c *Consumer[TTx]) handler() inbox.Handler[TTx] {
	return func(ctx context.Context, tx TTx, msg idem.Message) error {
		ctx = handlerContext(ctx, msg)
		defer c.endObserved(c.cfg.Observer.Start(c.cfg.Name))
		return panics.Call(ctx, c.log, msgPanicked, func() error { return c.cfg.Handler(ctx, tx, msg) }, attrs(c.cfg.Name, msg)...)
	}
}

// batchHandler wraps the user's batch handler with metrics and tracing:
// one handler duration and one span for the call.
func (c *Consumer[TTx]) batchHandler() inbox.BatchHandler[TTx] {
	return func(ctx context.Context, tx TTx, msgs []idem.Message) error {
		defer c.endObserved(c.cfg.Observer.Start(c.cfg.Name))
		return panics.Call(ctx, c.log, "batch handler panicked; its writes are rolled back and its messages applied one by one",
			func() error { return c.cfg.BatchHandler(ctx, tx, msgs) }, "messages", len(msgs))
	}
}

// ErrNoMessageID reports a delivery without a usable message id while
// Config.MessageID is not set: the message cannot be deduplicated, so it is
// dead-lettered under a synthesized id instead of being processed (see
// Config.MessageID). Errors wrapping it also wrap idem.ErrInvalidInput.
var ErrNoMessageID = errors.New("consumer: message has no usable id")

// noID is the error of a delivery whose broker id idErr rejected.
func noID(msg idem.Message, idErr error) error {
	return fmt.Errorf("%w (%w) on %q at position %q: the producer must set a stable message id "+
		"(JetStream Nats-Msg-Id, Kafka idem-id header, AMQP message-id) of 1 to 255 printable bytes, "+
		"or set consumer.Config.MessageID to derive one from the payload or headers, e.g. "+
		`MessageID: func(m idem.Message) (string, error) { return "order:" + orderIDOf(m.Payload), nil }`,
		ErrNoMessageID, idErr, msg.Subject, msg.Position)
}

// prepare validates a delivery's id and payload and applies MessageID. On
// error it returns the message as delivered, for the dead letter.
func (c *Consumer[TTx]) prepare(dv broker.Delivery) (idem.Message, error) {
	msg := dv.Message()
	if ownRevision(msg, c.cfg.Name) {
		return c.prepareRevision(msg)
	}
	if c.cfg.MessageID == nil {
		if err := checks.ID(msg.ID); err != nil {
			return msg, noID(msg, err)
		}
	}
	if err := c.validate(msg); err != nil {
		return msg, err
	}
	if c.cfg.MessageID != nil {
		var id string
		err := panics.Call(context.Background(), c.log, "MessageID panicked; the message is dead-lettered", func() (err error) {
			id, err = c.cfg.MessageID(msg)
			return err
		}, attrs(c.cfg.Name, msg)...)
		if err == nil {
			err = checks.ID(id)
		}
		if err != nil {
			return msg, idem.Permanent(fmt.Errorf("consumer: message id: %w", err))
		}
		msg.ID = id
	}
	return msg, nil
}

// validate runs Config.Validate, if any, on the payload. A panic of
// Validate (user code) is recovered and the message dead-lettered at once,
// class "panic", as with MessageID: the same payload would panic again.
func (c *Consumer[TTx]) validate(msg idem.Message) error {
	if c.cfg.Validate == nil {
		return nil
	}
	var refused error
	err := panics.Call(context.Background(), c.log, "Validate panicked; the message is dead-lettered", func() error {
		refused = c.cfg.Validate(msg.Payload)
		return nil
	}, attrs(c.cfg.Name, msg)...)
	if err != nil {
		return idem.Permanent(fmt.Errorf("consumer: Config.Validate: %w", err))
	}
	if refused != nil {
		return fmt.Errorf("%w: payload refused by Config.Validate: %v", idem.ErrInvalidInput, refused)
	}
	return nil
}

func (c *Consumer[TTx]) processOne(ctx context.Context, dv broker.Delivery) {
	ctx = c.consuming(ctx, dv)
	msg, err := c.prepare(dv)
	if err != nil {
		c.fail(ctx, dv, msg, err)
		return
	}
	tx, err := c.d.Begin(ctx)
	if err != nil {
		c.fail(ctx, dv, msg, fmt.Errorf("consumer: begin: %w", err))
		return
	}
	res, err := c.attempt(ctx, tx, msg)
	if err != nil && c.cfg.RetryInPlace {
		res, msg, err = c.retryInPlace(ctx, msg, err)
	}
	if err != nil {
		c.fail(ctx, dv, msg, err)
		return
	}
	c.succeeded(ctx, dv, msg, res)
}

// attempt processes msg in tx and commits (or rolls back) tx.
func (c *Consumer[TTx]) attempt(ctx context.Context, tx TTx, msg idem.Message) (inbox.Result, error) {
	res, err := c.ib.ProcessTx(ctx, tx, c.cfg.Name, msg, c.handler())
	if err != nil || res == inbox.Duplicate {
		_ = c.d.Rollback(context.WithoutCancel(ctx), tx)
	} else if err = c.d.Commit(ctx, tx); err != nil {
		err = fmt.Errorf("consumer: commit: %w", err)
	}
	return res, err
}

func (c *Consumer[TTx]) processBatch(ctx context.Context, ds []broker.Delivery) {
	msgs := make([]idem.Message, 0, len(ds))
	valid := make([]broker.Delivery, 0, len(ds))
	ctxs := make([]context.Context, 0, len(ds)) // per delivery, with its idem.consume span
	for _, dv := range ds {
		dctx := c.startConsume(ctx, dv)
		msg, err := c.prepare(dv)
		if err != nil {
			c.fail(dctx, dv, msg, err)
			continue
		}
		msgs = append(msgs, msg)
		valid = append(valid, dv)
		ctxs = append(ctxs, dctx)
	}
	if len(valid) == 0 {
		return
	}
	var outs []inbox.Outcome
	err := store.InTx(ctx, c.d, func(tx TTx) error {
		var err error
		bctx := withBatch(ctx, msgs, ctxs)
		if c.cfg.BatchHandler != nil {
			outs, err = c.ib.ProcessBatchWithTx(bctx, tx, c.cfg.Name, msgs, c.batchHandler(), c.handler())
			return err
		}
		outs, err = c.ib.ProcessBatchTx(bctx, tx, c.cfg.Name, msgs, c.handler())
		return err
	})
	if err != nil {
		// The batch's transaction failed as a whole: fall back to one
		// transaction per message so one bad message cannot hold back the
		// others.
		c.log.WarnContext(ctx, "batch failed; processing its messages one by one", "error", err, "size", len(valid))
		for i, dv := range valid {
			c.processOne(ctxs[i], dv)
		}
		return
	}
	// Settle the batch's deliveries. A subscriber that acks many at once
	// (broker.BatchAcker) gets the committed ones in one call; otherwise,
	// and for failures, deliveries are settled concurrently: each Ack waits
	// for the broker's confirmation (JetStream double ack), and one after
	// the other they would cost a round trip per message.
	ba, batchAck := c.sub.(broker.BatchAcker)
	var acks []settled
	var wg sync.WaitGroup
	sem := make(chan struct{}, maxConcurrentSettles)
	for i, dv := range valid {
		if batchAck && outs[i].Err == nil {
			if decision, ack := c.accepted(ctxs[i], msgs[i], outs[i].Result); ack {
				acks = append(acks, settled{ctx: ctxs[i], dv: dv, msg: msgs[i], decision: decision})
			} else {
				endConsume(ctxs[i], msgs[i], decision, nil)
			}
			continue
		}
		sem <- struct{}{}
		wg.Go(func() {
			defer func() { <-sem }()
			if outs[i].Err != nil {
				c.fail(ctxs[i], dv, msgs[i], outs[i].Err)
				return
			}
			c.succeeded(ctxs[i], dv, msgs[i], outs[i].Result)
		})
	}
	if len(acks) > 0 {
		c.ackBatch(ctx, ba, acks)
	}
	wg.Wait()
}

// settled is a committed (or duplicate) delivery of a batch waiting for
// its ack, with what its idem.consume span ends with.
type settled struct {
	ctx      context.Context
	dv       broker.Delivery
	msg      idem.Message
	decision string
}

// ackBatch acks a batch's committed deliveries with one BatchAcker call
// and ends their spans.
func (c *Consumer[TTx]) ackBatch(ctx context.Context, ba broker.BatchAcker, acks []settled) {
	ds := make([]broker.Delivery, len(acks))
	for i, a := range acks {
		ds[i] = a.dv
	}
	sctx, cancel := settleCtx(ctx)
	defer cancel()
	if err := ba.AckBatch(sctx, ds); err != nil {
		// The effects are committed; the redeliveries will be duplicates.
		failed := 0
		for i := range ds {
			if !broker.BatchAcked(err, i) {
				failed++
			}
		}
		c.log.WarnContext(ctx, "batch ack failed; the redeliveries will be deduplicated", "size", len(ds), "failed", failed, "error", err)
	}
	for _, a := range acks {
		endConsume(a.ctx, a.msg, a.decision, nil)
	}
}

// maxConcurrentSettles bounds the acks (or naks / dead letters) of one
// batch in flight at once.
const maxConcurrentSettles = 32

// settleCtx outlives a cancelled run context briefly, so deliveries being
// settled at shutdown still reach the broker.
func settleCtx(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
}

// succeeded acks a committed or duplicate delivery.
func (c *Consumer[TTx]) succeeded(ctx context.Context, dv broker.Delivery, msg idem.Message, res inbox.Result) {
	decision, ack := c.accepted(ctx, msg, res)
	defer endConsume(ctx, msg, decision, nil)
	if !ack {
		return
	}
	sctx, cancel := settleCtx(ctx)
	defer cancel()
	if err := dv.Ack(sctx); err != nil {
		// The effect is committed; the redelivery will be a duplicate.
		c.log.WarnContext(ctx, "ack failed; the redelivery will be deduplicated", append(attrs(c.cfg.Name, msg), "error", err)...)
	}
}

// accepted counts a committed or duplicate delivery and runs the
// AfterCommit hook; it returns the decision its span ends with and
// whether the delivery is to be acked (a failing hook skips the ack).
func (c *Consumer[TTx]) accepted(ctx context.Context, msg idem.Message, res inbox.Result) (decision string, ack bool) {
	decision = decisionProcessed
	if res == inbox.Duplicate {
		decision = decisionDuplicate
		c.cfg.Observer.DuplicateContext(ctx, "consumer", c.cfg.Name)
		c.log.DebugContext(ctx, "duplicate acknowledged without running the handler", attrs(c.cfg.Name, msg)...)
	} else {
		c.cfg.Observer.Processed(c.cfg.Name)
	}
	if h := c.cfg.Hooks.AfterCommit; h != nil && res == inbox.Processed {
		// A panic is logged and the delivery acked: the message committed,
		// and AfterCommit runs on a worker goroutine, where an unrecovered
		// panic would kill the process.
		if herr := c.afterCommit(ctx, h, msg); herr != nil {
			c.log.DebugContext(ctx, "AfterCommit hook: skipping the ack", append(attrs(c.cfg.Name, msg), "error", herr)...)
			return decision, false
		}
	}
	return decision, true
}

// safeObserver forwards the consumer's counts to Config.Observer (user
// code, called on the worker goroutines), recovering its panics: each is
// logged with its stack and otherwise ignored, so a broken metrics sink
// neither kills the process nor changes how a delivery is settled.
type safeObserver struct {
	idem.Observer
	log *slog.Logger
}

// recovered, deferred by each method, logs a panic of the user's
// Observer.method and stops it there. It builds nothing unless there was a
// panic: the methods run on every message.
func (o safeObserver) recovered(ctx context.Context, method string) {
	if p := recover(); p != nil {
		pe := &idem.PanicError{Value: p, Stack: debug.Stack()}
		o.log.ErrorContext(ctx, "Observer."+method+" panicked; ignored", "panic", pe.Error(), "stack", string(pe.Stack))
	}
}

// Start returns what Observer.Start returns, unwrapped (a wrapper would
// cost an allocation per message): the consumer calls it through
// endObserved, which recovers its panic.
func (o safeObserver) Start(consumer string) (done func()) {
	done = func() {} // what a panicking Start returns
	defer o.recovered(context.Background(), "Start")
	return o.Observer.Start(consumer)
}

// endObserved calls done, what Config.Observer's Start returned, logging
// and ignoring its panic.
func (c *Consumer[TTx]) endObserved(done func()) {
	defer safeObserver{log: c.log}.recovered(context.Background(), "Start's done")
	done()
}

func (o safeObserver) Processed(consumer string) {
	defer o.recovered(context.Background(), "Processed")
	o.Observer.Processed(consumer)
}

func (o safeObserver) DuplicateContext(ctx context.Context, component, consumer string) {
	defer o.recovered(ctx, "DuplicateContext")
	o.Observer.DuplicateContext(ctx, component, consumer)
}

func (o safeObserver) FingerprintConflict(component, consumer string) {
	defer o.recovered(context.Background(), "FingerprintConflict")
	o.Observer.FingerprintConflict(component, consumer)
}

func (o safeObserver) Failed(consumer, class string) {
	defer o.recovered(context.Background(), "Failed")
	o.Observer.Failed(consumer, class)
}

func (o safeObserver) Retry(consumer string) {
	defer o.recovered(context.Background(), "Retry")
	o.Observer.Retry(consumer)
}

func (o safeObserver) DeadLetteredContext(ctx context.Context, consumer, class string) {
	defer o.recovered(ctx, "DeadLetteredContext")
	o.Observer.DeadLetteredContext(ctx, consumer, class)
}

func (o safeObserver) Unidentified(consumer string) {
	defer o.recovered(context.Background(), "Unidentified")
	o.Observer.Unidentified(consumer)
}

// safeRerouter recovers the panics of Config.Reroute (user code, called on
// the worker goroutines): logged with its stack, a panic is an error of
// Reroute, so the delivery is sent back for redelivery.
type safeRerouter struct {
	Rerouter
	name string // the consumer's
	log  *slog.Logger
}

func (r safeRerouter) Reroute(ctx context.Context, msg idem.Message, err error) error {
	return panics.Call(ctx, r.log, "Reroute panicked; the delivery is sent back for redelivery",
		func() error { return r.Rerouter.Reroute(ctx, msg, err) }, attrs(r.name, msg)...)
}

// fail settles a delivery whose processing failed: dead letter + Term for
// permanent failures and exhausted retries, Nak with backoff otherwise.
func (c *Consumer[TTx]) fail(ctx context.Context, dv broker.Delivery, msg idem.Message, err error) {
	decision := decisionRetry
	defer func() { endConsume(ctx, msg, decision, err) }()
	sctx, cancel := settleCtx(ctx)
	defer cancel()
	if ctx.Err() != nil && errors.Is(err, ctx.Err()) {
		// Shutting down mid-message: hand it back for prompt redelivery.
		_ = dv.Nak(sctx, 0)
		return
	}
	class := idem.ErrorClass(err)
	c.cfg.Observer.Failed(c.cfg.Name, class)
	if errors.Is(err, idem.ErrFingerprintMismatch) {
		c.cfg.Observer.FingerprintConflict("consumer", c.cfg.Name)
	}
	if c.rerouted(ctx, sctx, dv, msg, err, class) {
		decision = decisionRerouted
		return
	}
	park := idem.IsPermanent(err) || errors.Is(err, idem.ErrNeedsReconciliation) || msg.Attempt >= c.cfg.MaxAttempts
	if !park {
		delay := c.cfg.Backoff.Delay(max(msg.Attempt, 1), nil)
		c.cfg.Observer.Retry(c.cfg.Name)
		c.log.WarnContext(ctx, "processing failed; retrying", append(attrs(c.cfg.Name, msg), "error", err, "class", class, "delay", delay)...)
		if nerr := dv.Nak(sctx, delay); nerr != nil {
			c.log.WarnContext(ctx, "nak failed; the broker redelivers after its ack wait", append(attrs(c.cfg.Name, msg), "error", nerr)...)
		}
		return
	}
	if !idem.IsPermanent(err) && !errors.Is(err, idem.ErrNeedsReconciliation) {
		err = fmt.Errorf("gave up after %d attempts: %w", msg.Attempt, err)
	}
	// A message without a usable id is parked under its broker
	// coordinates (dlq.SyntheticID).
	l := dlq.FromMessage(c.cfg.Name, msg, err)
	l.Headers = withOrigin(l.Headers, dv) // the broker's coordinates (broker.Locator)
	unidentified := l.MessageID != msg.ID
	msg.ID = l.MessageID // for the logs
	letter, perr := c.cfg.DLQ.Park(sctx, l)
	if perr != nil {
		// Never drop a message we could not park: retry later.
		c.log.ErrorContext(ctx, "dead-lettering failed; retrying the message", append(attrs(c.cfg.Name, msg), "error", perr, "reason", err)...)
		if nerr := dv.Nak(sctx, c.cfg.Backoff.Delay(max(msg.Attempt, 1), nil)); nerr != nil {
			c.log.WarnContext(ctx, "nak failed; the broker redelivers after its ack wait", append(attrs(c.cfg.Name, msg), "error", nerr)...)
		}
		return
	}
	decision = decisionDeadLettered
	c.cfg.Observer.DeadLetteredContext(ctx, c.cfg.Name, class)
	if unidentified {
		c.cfg.Observer.Unidentified(c.cfg.Name)
		c.log.ErrorContext(ctx, "message without a usable id dead-lettered; set consumer.Config.MessageID or have the producer set a message id",
			append(attrs(c.cfg.Name, msg), "letter", letter, "error", err, "class", class)...)
	} else {
		c.log.WarnContext(ctx, "message dead-lettered", append(attrs(c.cfg.Name, msg), "letter", letter, "error", err, "class", class)...)
	}
	if terr := dv.Term(sctx); terr != nil {
		// Redelivered later; parking again updates the same letter.
		c.log.WarnContext(ctx, "term failed", append(attrs(c.cfg.Name, msg), "error", terr)...)
	}
}

func attrs(consumer string, msg idem.Message) []any {
	as := obs.MessageAttrs(consumer, msg)
	out := make([]any, len(as))
	for i, a := range as {
		out[i] = a
	}
	return out
}

// afterCommit runs the AfterCommit hook h on msg and returns its error; a
// panic is logged with its stack (the message committed, and the hook runs
// on a worker goroutine) and returns nil, so the delivery is acked. Nothing
// is built for the log unless the hook panicked.
func (c *Consumer[TTx]) afterCommit(ctx context.Context, h func(idem.Message) error, msg idem.Message) (err error) {
	defer func() {
		if p := recover(); p != nil {
			pe := &idem.PanicError{Value: p, Stack: debug.Stack()}
			c.log.ErrorContext(ctx, "AfterCommit hook panicked; the message is committed and acknowledged",
				append(attrs(c.cfg.Name, msg), "panic", pe.Error(), "stack", string(pe.Stack))...)
			err = nil
		}
	}()
	return h(msg)
}
