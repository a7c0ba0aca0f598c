// Package idemjetstream adapts NATS JetStream (github.com/nats-io/nats.go/jetstream)
// to idem's broker seam.
//
//	nc, js, err := idemjetstream.Dial("nats://127.0.0.1:4222")
//	_, err = idemjetstream.EnsureStream(ctx, js, jetstream.StreamConfig{Name: "ORDERS", Subjects: []string{"order-events"}})
//	pub, err := idemjetstream.NewPublisher(js, idemjetstream.PublisherConfig{})
//	relay, err := outbox.NewRelay(d, pub, outbox.RelayConfig{}) // Nats-Msg-Id = the event's id
//	sub, err := idemjetstream.NewSubscriber(ctx, js, idemjetstream.SubscriberConfig{Stream: "ORDERS", Durable: "billing"})
//	c, err := consumer.New(d, ib, sub, consumer.Config[pgx.Tx]{Name: "billing", Handler: apply})
//	err = idem.Run(ctx, relay, c) // acked after the handler's commit
//	// no server at hand: srv, err := embedded.Start(embedded.Config{DataDir: dir}), then Dial(srv.ClientURL())
//
// Publishing sets Nats-Msg-Id to the message id and waits for the stream's
// PubAck, so a republish inside the stream's duplicate window (default 2
// minutes, see [EnsureStream]) is stored once and reported as a duplicate.
// Consuming uses a durable pull consumer with explicit acks: Ack is a
// double ack (it waits for the server to confirm), [Subscriber.AckBatch]
// acks many deliveries in one round trip, the last of them a double ack
// (the consumer runtime uses it for a batch), Nak maps to NakWithDelay, Term to Term; the delivery attempt is
// the consumer's NumDelivered and the position is the stream sequence.
//
// The key travels in the Idem-Key header and the producer time in
// Idem-Time (RFC 3339); both are removed from the headers handed to
// consumers, as is Nats-Msg-Id (it becomes Message.ID).
//
// Package embedded runs an in-process JetStream server for the zero set-up
// default.
package idemjetstream

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/broker"
	"github.com/idemkit/idem/internal/checks"
	"github.com/idemkit/idem/internal/obs"
	"github.com/idemkit/idem/internal/origin"
	"github.com/idemkit/idem/internal/redact"
)

// Header names the adapter sets on every published message.
const (
	// HeaderIdemID carries the message id when it differs from Nats-Msg-Id
	// (a redrive, see broker.HeaderRedrive); it then becomes Message.ID.
	HeaderIdemID = "Idem-Msg-Id"
	HeaderMsgID  = jetstream.MsgIDHeader // "Nats-Msg-Id": the message id, JetStream's dedup key
	HeaderKey    = "Idem-Key"            // the ordering key, when not empty
	HeaderTime   = "Idem-Time"           // the producer time (RFC 3339 nano), when not zero
)

// Dial connects to a NATS server with settings suited to idem: reconnect
// forever, name "idem". opts are applied after those and may override
// them. The caller closes the connection.
func Dial(url string, opts ...nats.Option) (*nats.Conn, jetstream.JetStream, error) {
	nc, err := nats.Connect(url, append([]nats.Option{nats.Name("idem"), nats.MaxReconnects(-1)}, opts...)...)
	if err != nil {
		return nil, nil, fmt.Errorf("jetstream: connect %s: %w", redact.URL(url), errors.Join(err, broker.ErrUnavailable))
	}
	js, err := jetstream.New(nc)
	if err != nil {
		nc.Close()
		return nil, nil, fmt.Errorf("jetstream: %w", err)
	}
	return nc, js, nil
}

// DefaultDuplicateWindow is the duplicate window [EnsureStream] uses when
// the config sets none.
const DefaultDuplicateWindow = 2 * time.Minute

// EnsureStream creates the stream, or updates it to cfg if it exists.
// cfg.Duplicates (the window in which a repeated Nats-Msg-Id is dropped
// and reported as a duplicate) defaults to [DefaultDuplicateWindow];
// storage defaults to file. Keep the window longer than the longest time a
// relay may take to republish after a crash.
func EnsureStream(ctx context.Context, js jetstream.JetStream, cfg jetstream.StreamConfig) (jetstream.Stream, error) {
	if cfg.Name == "" {
		return nil, checks.Optionf("jetstream: stream name is required")
	}
	cfg.Duplicates = cmp.Or(cfg.Duplicates, DefaultDuplicateWindow)
	s, err := js.CreateOrUpdateStream(ctx, cfg)
	if err != nil {
		return nil, fmt.Errorf("jetstream: ensure stream %q: %w", cfg.Name, err)
	}
	return s, nil
}

// PublisherConfig configures a [Publisher].
type PublisherConfig struct {
	// AckTimeout bounds the wait for each PubAck when ctx has no deadline.
	// Defaults to 5s.
	AckTimeout time.Duration
	// MaxInFlight is how many messages of one Publish call may await
	// their PubAcks at once: past it, the oldest is awaited before the
	// next is sent. Messages are sent in order on one connection, so the
	// stream stores them in order; 1 makes publishing strictly one at a
	// time. Defaults to 256.
	MaxInFlight int
	// OnResult, if set, is called for every PubAck (duplicates included),
	// from the publishing goroutine.
	OnResult func(broker.PublishResult)
	// Logger receives debug logs. Defaults to discard.
	Logger *slog.Logger
}

// Publisher publishes to JetStream. It implements [broker.Publisher] and
// [broker.ResultPublisher] and is safe for concurrent use.
type Publisher struct {
	js         jetstream.JetStream
	cfg        PublisherConfig
	log        *slog.Logger
	duplicates atomic.Int64
	published  atomic.Int64
	closed     atomic.Bool
}

// NewPublisher returns a publisher on js. The publisher does not own the
// connection: closing it leaves js usable.
func NewPublisher(js jetstream.JetStream, cfg PublisherConfig) (*Publisher, error) {
	switch {
	case js == nil:
		return nil, checks.Optionf("jetstream: nil JetStream")
	case cfg.AckTimeout < 0:
		return nil, checks.Optionf("jetstream: negative AckTimeout")
	case cfg.MaxInFlight < 0:
		return nil, checks.Optionf("jetstream: negative MaxInFlight")
	}
	cfg.AckTimeout = cmp.Or(cfg.AckTimeout, 5*time.Second)
	cfg.MaxInFlight = cmp.Or(cfg.MaxInFlight, 256)
	return &Publisher{js: js, cfg: cfg, log: obs.Component(cfg.Logger, "broker/jetstream")}, nil
}

// Duplicates returns how many PubAcks so far reported a duplicate: a
// message whose id the stream had already stored inside its duplicate
// window, and which it therefore did not store again.
func (p *Publisher) Duplicates() int64 { return p.duplicates.Load() }

// Published returns how many PubAcks (duplicates included) were received.
func (p *Publisher) Published() int64 { return p.published.Load() }

// Publish publishes msgs; see [Publisher.PublishResults].
func (p *Publisher) Publish(ctx context.Context, msgs ...idem.Message) error {
	_, err := p.PublishResults(ctx, msgs...)
	return err
}

// PublishResults publishes msgs in order to their subjects (a stream must
// capture them) with Nats-Msg-Id = msg.ID and returns once every PubAck
// arrived, reporting each message's stream sequence and whether the stream
// dropped it as a duplicate. On error (no stream, timeout, connection
// lost) the results of the messages acknowledged so far are returned;
// later messages of the call may or may not have been stored — republish
// them all, the duplicate window absorbs the repeats.
func (p *Publisher) PublishResults(ctx context.Context, msgs ...idem.Message) ([]broker.PublishResult, error) {
	if p.closed.Load() {
		return nil, broker.ErrClosed
	}
	if err := broker.ValidateMessages("jetstream", "subject", msgs); err != nil {
		return nil, err
	}
	res := make([]broker.PublishResult, 0, len(msgs))
	// A sliding window: once MaxInFlight messages await their PubAcks,
	// the oldest is awaited before the next is sent, so the connection
	// never drains between windows. Acks are read in send order, so res
	// stays a prefix of msgs.
	futures := make([]jetstream.PubAckFuture, 0, len(msgs))
	awaited := 0
	awaitNext := func() error {
		r, err := p.await(ctx, futures[awaited])
		if err != nil {
			return err
		}
		res = append(res, r)
		awaited++
		return nil
	}
	awaitAll := func() error {
		for awaited < len(futures) {
			if err := awaitNext(); err != nil {
				return err
			}
		}
		return nil
	}
	for _, m := range msgs {
		if len(futures)-awaited >= p.cfg.MaxInFlight {
			if err := awaitNext(); err != nil {
				return res, err
			}
		}
		f, err := p.js.PublishMsgAsync(toNats(m))
		if err != nil {
			if werr := awaitAll(); werr != nil {
				return res, werr
			}
			return res, fmt.Errorf("jetstream: publish %q: %w", m.ID, errors.Join(err, broker.ErrUnavailable))
		}
		futures = append(futures, f)
	}
	if err := awaitAll(); err != nil {
		return res, err
	}
	return res, nil
}

func (p *Publisher) await(ctx context.Context, f jetstream.PubAckFuture) (broker.PublishResult, error) {
	id := f.Msg().Header.Get(HeaderIdemID)
	if id == "" {
		id = f.Msg().Header.Get(HeaderMsgID)
	}
	var timeout <-chan time.Time
	if _, ok := ctx.Deadline(); !ok {
		t := time.NewTimer(p.cfg.AckTimeout)
		defer t.Stop()
		timeout = t.C
	}
	select {
	case ack := <-f.Ok():
		p.published.Add(1)
		r := broker.PublishResult{ID: id, Position: strconv.FormatUint(ack.Sequence, 10), Duplicate: ack.Duplicate}
		if ack.Duplicate {
			p.duplicates.Add(1)
			p.log.DebugContext(ctx, "stream reported a duplicate", "msg_id", id, "stream", ack.Stream, "seq", ack.Sequence)
		}
		if p.cfg.OnResult != nil {
			p.cfg.OnResult(r)
		}
		return r, nil
	case err := <-f.Err():
		return broker.PublishResult{}, fmt.Errorf("jetstream: publish %q: %w", id, p.classifyPublish(ctx, f.Msg().Subject, err))
	case <-timeout:
		return broker.PublishResult{}, fmt.Errorf("jetstream: publish %q: no PubAck within %v: %w", id, p.cfg.AckTimeout, broker.ErrUnavailable)
	case <-ctx.Done():
		return broker.PublishResult{}, fmt.Errorf("jetstream: publish %q: %w", id, ctx.Err())
	}
}

// noRouteCheck bounds the stream lookup that tells a subject no stream
// covers from a stream that does not answer for now.
const noRouteCheck = 2 * time.Second

// classifyPublish is classify for a publish to subject, which tells a
// subject that no stream covers (a configuration mistake: a permanent
// [broker.ErrNoRoute] naming the subject) apart from a stream that does not
// answer for now (a leader election, an outage: [broker.ErrUnavailable]).
// Both look alike to the publisher (no responders); the server's stream
// index decides, and when it does not answer either, the broker is taken to
// be unavailable.
func (p *Publisher) classifyPublish(ctx context.Context, subject string, err error) error {
	if !errors.Is(err, nats.ErrNoResponders) && !errors.Is(err, jetstream.ErrNoStreamResponse) {
		return classify(err)
	}
	qctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), noRouteCheck)
	defer cancel()
	if _, serr := p.js.StreamNameBySubject(qctx, subject); errors.Is(serr, jetstream.ErrStreamNotFound) {
		return idem.Permanent(fmt.Errorf("no stream covers subject %q (add the subject to a stream, then retry the parked events): %w",
			subject, errors.Join(err, broker.ErrNoRoute)))
	}
	return classify(err)
}

// classify marks connection-level failures as broker.ErrUnavailable.
func classify(err error) error {
	switch {
	case errors.Is(err, nats.ErrConnectionClosed), errors.Is(err, nats.ErrNoResponders),
		errors.Is(err, nats.ErrTimeout), errors.Is(err, jetstream.ErrNoStreamResponse),
		errors.Is(err, jetstream.ErrAsyncPublishTimeout), errors.Is(err, nats.ErrDisconnected),
		errors.Is(err, nats.ErrConnectionReconnecting), errors.Is(err, context.DeadlineExceeded),
		errors.Is(err, jetstream.ErrNoHeartbeat):
		return errors.Join(err, broker.ErrUnavailable)
	}
	return err
}

func toNats(m idem.Message) *nats.Msg {
	// nats.Header holds a []string per name; the values share one backing
	// array (each header one element of it, capacity 1 so that an append
	// by a caller copies instead of overwriting the next), which makes a
	// message with ten headers two allocations instead of eleven.
	vals := make([]string, 0, len(m.Headers)+4)
	h := make(nats.Header, len(m.Headers)+4)
	set := func(k, v string) {
		vals = append(vals, v)
		h[k] = vals[len(vals)-1 : len(vals) : len(vals)]
	}
	for k, v := range m.Headers {
		set(k, v)
	}
	dedup := broker.DedupID(m)
	set(HeaderMsgID, dedup)
	if dedup != m.ID {
		// A deliberate republish: the stream dedups it under its own id,
		// consumers get the original one.
		set(HeaderIdemID, m.ID)
	}
	if m.Key != "" {
		set(HeaderKey, m.Key)
	}
	if !m.Time.IsZero() {
		set(HeaderTime, m.Time.UTC().Format(time.RFC3339Nano))
	}
	return &nats.Msg{Subject: m.Subject, Header: h, Data: m.Payload}
}

// Close marks the publisher closed; the connection stays open.
func (p *Publisher) Close() error {
	p.closed.Store(true)
	return nil
}

// SubscriberConfig configures a [Subscriber].
type SubscriberConfig struct {
	// Stream is the stream to consume. Required.
	Stream string
	// Durable is the durable consumer name (the subscription): subscribers
	// with the same name share its messages. Required.
	Durable string
	// FilterSubjects restricts the consumer to these subjects. Defaults to
	// every subject of the stream.
	FilterSubjects []string
	// AckWait is how long a delivery may stay unacknowledged before the
	// server redelivers it. Defaults to 30s.
	AckWait time.Duration
	// MaxDeliver stops redelivery after this many deliveries. Defaults to
	// -1: unlimited (idem's consumer runtime dead-letters by itself). A
	// consumer refuses a subscriber whose MaxDeliver is below its
	// MaxAttempts (see [Subscriber.MaxDeliveries]).
	MaxDeliver int
	// MaxAckPending bounds the unacknowledged deliveries in flight.
	// Defaults to 1000.
	MaxAckPending int
	// Logger receives debug logs. Defaults to discard.
	Logger *slog.Logger
}

// Subscriber pulls from a durable JetStream consumer with explicit acks.
// It implements [broker.Subscriber] and is safe for concurrent use.
//
// A crash or Close leaves unacknowledged deliveries with the server, which
// redelivers them after AckWait with NumDelivered (Attempt) incremented.
type Subscriber struct {
	js     jetstream.JetStream
	stream string
	cons   jetstream.Consumer
	log    *slog.Logger
	mu     sync.Mutex
	closed bool // protected by mu
	paused bool // protected by mu; see Pause
	// caughtUp is set when the last Fetch that pulled came back short
	// (with none, for a Fetch of one message): the next Fetch waits for a
	// message first instead of gathering what is waiting (a hint only;
	// either way nothing is missed). A new subscriber gathers first.
	caughtUp atomic.Bool
}

// NewSubscriber creates (or updates) the durable pull consumer described
// by cfg, delivering every message of the stream from the start, and
// returns a subscriber on it.
func NewSubscriber(ctx context.Context, js jetstream.JetStream, cfg SubscriberConfig) (*Subscriber, error) {
	switch {
	case js == nil:
		return nil, checks.Optionf("jetstream: nil JetStream")
	case cfg.Stream == "" || cfg.Durable == "":
		return nil, checks.Optionf("jetstream: Stream and Durable are required")
	case cfg.AckWait < 0 || cfg.MaxAckPending < 0:
		return nil, checks.Optionf("jetstream: negative AckWait or MaxAckPending")
	}
	cc := jetstream.ConsumerConfig{
		Durable:       cfg.Durable,
		AckPolicy:     jetstream.AckExplicitPolicy,
		DeliverPolicy: jetstream.DeliverAllPolicy,
		AckWait:       cmp.Or(cfg.AckWait, 30*time.Second),
		MaxDeliver:    cmp.Or(cfg.MaxDeliver, -1),
		MaxAckPending: cmp.Or(cfg.MaxAckPending, 1000),
	}
	switch len(cfg.FilterSubjects) {
	case 0:
	case 1:
		cc.FilterSubject = cfg.FilterSubjects[0]
	default:
		cc.FilterSubjects = cfg.FilterSubjects
	}
	cons, err := js.CreateOrUpdateConsumer(ctx, cfg.Stream, cc)
	if err != nil {
		return nil, fmt.Errorf("jetstream: consumer %q on %q: %w", cfg.Durable, cfg.Stream, classify(err))
	}
	return &Subscriber{js: js, stream: cfg.Stream, cons: cons, log: obs.Component(cfg.Logger, "broker/jetstream", "consumer", cfg.Durable)}, nil
}

// MaxDeliveries returns the durable consumer's MaxDeliver as the server
// holds it (-1: unlimited). It implements [broker.DeliveryLimiter].
func (s *Subscriber) MaxDeliveries() int {
	return s.cons.CachedInfo().Config.MaxDeliver
}

// Fetch returns up to max messages (max < 1 means 1) once one is
// available, waiting at most maxWait for the first, or until ctx's
// deadline if that comes first (maxWait is at most a day).
//
// A JetStream pull for n messages ends only when n have come or it
// expires, so Fetch does not ask for max and wait: when the stream may
// hold a backlog (the last Fetch that pulled came back full, or this
// subscriber has not fetched yet) it pulls max for a few milliseconds (gather), which
// takes what is waiting; otherwise, or when that found nothing, a pull for
// one message waits, and a second pull of a few milliseconds, sent once
// the first message is here, gathers what came with it. Neither of the
// later pulls is sent once Pause or Close was called. (A no_wait pull
// is not used: when the consumer's MaxAckPending holds back part of the
// batch, the server keeps such a pull open, and nats.go stops reading it
// only after a second of silence, past the fetch's wait and deaf to its
// context.)
//
// The server ends a waiting pull a tenth of the wait early (at most a
// second); should its answer be late or lost, Fetch stops waiting a
// quarter of a second, or a tenth of maxWait, after maxWait. A ctx
// deadline before maxWait ends the fetch at that deadline on the client's
// clock (the server's expiry a tenth earlier), as a cancellation does. It
// returns no deliveries and a nil error when the wait passed, and ctx's
// error when ctx is done before nats.go handed over any message (those it
// did are returned, with a nil error; the rest come back after AckWait).
func (s *Subscriber) Fetch(ctx context.Context, max int, maxWait time.Duration) ([]broker.Delivery, error) {
	if st := s.state(); st != stateOpen || ctx.Err() != nil {
		return s.idle(ctx, st, maxWait)
	}
	max = cmp.Or(max, 1)
	if max < 1 {
		max = 1
	}
	maxWait = min(max2(maxWait, time.Millisecond), 24*time.Hour)
	deadline := time.Now().Add(maxWait)
	if d, ok := ctx.Deadline(); ok && d.Before(deadline) {
		deadline = d
	}
	gatherUntil := func() time.Time { return minTime(deadline, time.Now().Add(gather)) }
	if max > 1 && !s.caughtUp.Load() {
		out, err := s.pull(ctx, max, gatherUntil())
		if err != nil || len(out) > 0 {
			s.caughtUp.Store(len(out) < max)
			return out, err
		}
		// Nothing was waiting. Paused or closed meanwhile: no more pulls.
		if st := s.state(); st != stateOpen {
			return s.idle(ctx, st, time.Until(deadline))
		}
	}
	out, err := s.pull(ctx, 1, deadline)
	if err != nil || len(out) == 0 || max == 1 {
		s.caughtUp.Store(len(out) == 0)
		return out, err
	}
	// The first message came: gather what came with it, unless Pause or
	// Close came meanwhile (Pause promises no pull until Resume). An error
	// here leaves the first to be processed; the next Fetch meets it again.
	if s.state() != stateOpen {
		s.caughtUp.Store(true)
		return out, nil
	}
	more, err := s.pull(ctx, max-1, gatherUntil())
	if err != nil {
		s.log.DebugContext(ctx, "pull after the first message failed", "error", err)
	}
	out = append(out, more...)
	s.caughtUp.Store(len(out) < max)
	return out, nil
}

// The subscriber's state, as Fetch reads it between its pulls.
const (
	stateOpen = iota
	statePaused
	stateClosed
)

func (s *Subscriber) state() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	switch {
	case s.closed:
		return stateClosed
	case s.paused:
		return statePaused
	}
	return stateOpen
}

// idle answers a Fetch that sends no pull: closed (broker.ErrClosed), ctx
// done (its error), or paused (nothing, after wait).
func (s *Subscriber) idle(ctx context.Context, st int, wait time.Duration) ([]broker.Delivery, error) {
	if st == stateClosed {
		return nil, broker.ErrClosed
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	return s.pausedFetch(ctx, wait)
}

// gather is how long Fetch pulls for the messages that came with the
// first, or that are waiting: a few milliseconds, so the server has
// answered with what it holds (and what arrives meanwhile, as a relay's
// batch does), without holding a batch back for FetchWait.
const gather = 5 * time.Millisecond

func minTime(a, b time.Time) time.Time {
	if b.Before(a) {
		return b
	}
	return a
}

// pull waits until deadline (or ctx is done) for up to n messages.
func (s *Subscriber) pull(ctx context.Context, n int, deadline time.Time) ([]broker.Delivery, error) {
	// The pull ends by the server's expiry: its status message comes after
	// every message the server delivered to the pull, so none is left
	// behind. nats.go's FetchContext also ended it at the context's
	// deadline, on the client's clock, a tenth of the wait after the
	// server's expiry: a message the server sent just before its expiry
	// could arrive after the client had stopped reading, and it then
	// waited for the server to redeliver it (AckWait, 30s by default) with
	// its delivery count raised. The pull's context gives nats.go the
	// deadline (the server's expiry is set from it, a tenth early, as
	// before) but is done only when ctx is or the backstop fires.
	pctx, stop := context.WithCancel(ctx)
	defer stop()
	batch, err := s.cons.Fetch(n, jetstream.FetchContext(pullContext{pctx, deadline}))
	if err != nil {
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		if time.Until(deadline) <= 0 {
			return nil, nil
		}
		return nil, fmt.Errorf("jetstream: fetch: %w", classify(err))
	}
	// A backstop in case the server's answer is late or lost (a loaded or
	// restarted server, a broken connection).
	wait := time.Until(deadline)
	backstop := time.AfterFunc(wait+max2(250*time.Millisecond, wait/10), stop)
	defer backstop.Stop()
	out := s.deliveries(ctx, batch)
	if err := batch.Error(); err != nil && len(out) == 0 {
		switch {
		case ctx.Err() != nil:
			return nil, ctx.Err()
		case pctx.Err() != nil:
			return nil, nil // the backstop (nats.go reports the server's expiry as no error)
		}
		return nil, fmt.Errorf("jetstream: fetch: %w", classify(err))
	}
	return out, nil
}

// deliveries reads a pull's messages until nats.go closes it.
func (s *Subscriber) deliveries(ctx context.Context, batch jetstream.MessageBatch) []broker.Delivery {
	var out []broker.Delivery
	for m := range batch.Messages() {
		d, err := newDelivery(m)
		if err != nil {
			s.log.WarnContext(ctx, "message without metadata", "error", err)
			continue
		}
		d.sub = s
		out = append(out, d)
	}
	return out
}

// pullContext is the context of one pull: nats.go sets the pull's expiry
// on the server from its deadline, but it is done only when its parent is
// (the caller's context, or Fetch's backstop), not at the deadline.
type pullContext struct {
	context.Context
	deadline time.Time
}

// Deadline returns the pull's deadline.
func (c pullContext) Deadline() (time.Time, bool) { return c.deadline, true }

func max2(a, b time.Duration) time.Duration {
	if a < b {
		return b
	}
	return a
}

// AckBatch acks ds in one round trip: every ack but the last is sent
// without waiting for a reply, and the last is a double ack (Ack), whose
// reply comes once the server has processed it — after the acks sent
// before it on the same connection, which the consumer processes in the
// order they arrive (for a replicated consumer, once applied). Deliveries
// that another subscriber made, or that this package did not make, are
// acked one by one with Ack. When some acks fail it returns a
// [*broker.BatchAckError] naming them; a failed double ack leaves the acks
// sent before it in doubt, so they are reported failed too.
func (s *Subscriber) AckBatch(ctx context.Context, ds []broker.Delivery) error {
	errs := make([]error, len(ds))
	var sent []int // own acks sent unconfirmed, before the last
	last := -1
	for i, d := range ds {
		jd, ok := d.(*delivery)
		if !ok || jd.sub != s {
			errs[i] = d.Ack(ctx)
			continue
		}
		if last >= 0 {
			if err := ds[last].(*delivery).m.Ack(); err != nil {
				errs[last] = fmt.Errorf("jetstream: ack %q: %w", ds[last].Message().ID, classify(err))
			} else {
				sent = append(sent, last)
			}
		}
		last = i
	}
	if last >= 0 {
		if err := ds[last].Ack(ctx); err != nil {
			// Without the double ack's reply, the acks sent before it
			// are in doubt too.
			errs[last] = err
			for _, i := range sent {
				errs[i] = fmt.Errorf("jetstream: ack %q unconfirmed: %w", ds[i].Message().ID, err)
			}
		}
	}
	return broker.NewBatchAckError(errs)
}

var _ broker.BatchAcker = (*Subscriber)(nil)

// Close stops using the consumer. The durable consumer stays on the
// server; its unacknowledged deliveries are redelivered after AckWait.
func (s *Subscriber) Close() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.closed = true
	return nil
}

type delivery struct {
	sub  *Subscriber // the subscriber that fetched it
	m    jetstream.Msg
	msg  idem.Message
	meta *jetstream.MsgMetadata
}

func newDelivery(m jetstream.Msg) (*delivery, error) {
	meta, err := m.Metadata()
	if err != nil {
		return nil, err
	}
	msg := idem.Message{
		Subject:  m.Subject(),
		Payload:  m.Data(),
		Attempt:  int(meta.NumDelivered),
		Position: strconv.FormatUint(meta.Sequence.Stream, 10),
		Time:     meta.Timestamp,
	}
	for k, v := range m.Headers() {
		if len(v) == 0 {
			continue
		}
		switch k {
		case HeaderMsgID:
			if msg.ID == "" {
				msg.ID = v[0]
			}
		case HeaderIdemID:
			msg.ID = v[0]
		case HeaderKey:
			msg.Key = v[0]
		case HeaderTime:
			if t, err := time.Parse(time.RFC3339Nano, v[0]); err == nil {
				msg.Time = t
			}
		default:
			if msg.Headers == nil {
				msg.Headers = map[string]string{}
			}
			msg.Headers[k] = v[0]
		}
	}
	return &delivery{m: m, msg: msg, meta: meta}, nil
}

func (d *delivery) Message() idem.Message { return d.msg }

// Origin implements [broker.Locator]: the stream, the message's stream
// sequence, the durable consumer and the subject.
func (d *delivery) Origin() map[string]string {
	return map[string]string{
		origin.Stream:    d.meta.Stream,
		origin.StreamSeq: strconv.FormatUint(d.meta.Sequence.Stream, 10),
		origin.Consumer:  d.meta.Consumer,
		origin.Subject:   d.msg.Subject,
	}
}

// Ack double-acks: it returns once the server confirmed the ack, so a nil
// error means the message will not be redelivered.
func (d *delivery) Ack(ctx context.Context) error {
	if err := d.m.DoubleAck(ctx); err != nil {
		return fmt.Errorf("jetstream: ack %q: %w", d.msg.ID, classify(err))
	}
	return nil
}

// Nak asks the server to redeliver after delay (NakWithDelay).
func (d *delivery) Nak(ctx context.Context, delay time.Duration) error {
	var err error
	if delay > 0 {
		err = d.m.NakWithDelay(delay)
	} else {
		err = d.m.Nak()
	}
	if err != nil {
		return fmt.Errorf("jetstream: nak %q: %w", d.msg.ID, classify(err))
	}
	return nil
}

// Term tells the server never to redeliver the message.
func (d *delivery) Term(ctx context.Context) error {
	if err := d.m.Term(); err != nil {
		return fmt.Errorf("jetstream: term %q: %w", d.msg.ID, classify(err))
	}
	return nil
}
