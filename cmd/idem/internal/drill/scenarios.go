package drill

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/broker"
	"github.com/idemkit/idem/cmd/idem/boxoffice"
	"github.com/idemkit/idem/dlq"
	"github.com/idemkit/idem/effect"
	"github.com/idemkit/idem/internal/operator"
	"github.com/idemkit/idem/retention"
)

func scenarios() []scenario {
	return []scenario{
		{"lost-response", "1", "retry after a lost response replays it; one invoice + one e-mail per order", lostResponse},
		{"racing-duplicates", "2", "racing requests with one key: one order; answers = original or 409", racingDuplicates},
		{"key-reuse", "3", "same key, other payload: 422, nothing changes", keyReuse},
		{"crash-before-ack", "4", "crash after commit, before ack: the inbox absorbs the redelivery", crashBeforeAck},
		{"webhook-replay", "5", "webhook replays answer 2xx and pay once; forged one 401", webhookReplay},
		{"relay-double-publish", "6", "events published twice (lost broker acks) take effect once", relayDoublePublish},
		{"worker-crash-after-call", "7", "worker dies after the provider call: same key resent, sent once", workerCrash},
		{"expiry-late-retry", "8", "expired key: late retry runs anew (documented); business keys hold", expiryLateRetry},
		{"concurrent-delivery", "9", "one message to two consumer instances at once: one effect", concurrentDelivery},
		{"transient-permanent-dlq", "10", "transient → retried; poison → DLQ exactly; redrive once = one effect", transientPermanentDLQ},
		{"out-of-order", "11", "versions applied out of order leave the newest", outOfOrder},
		{"provider-timeout", "12", "provider times out after sending: retried with its key, sent once", providerTimeout},
		{"replay-equivalence", "13", "replayed response = original (status, body, Location) = stored order", replayEquivalence},
		{"horizon-late-redrive", "8,10", "late redrive after the original expired: refused, one effect per id (forced: two)", horizonLateRedrive},
		{"revise-one-consumer", "10", "one message poisoned for 3 consumers: revise one, redrive one, resend it: each applies it once", reviseOneConsumer},
		{"saga-crash-after-step", "14", "saga worker dies after the charge, before recording it: same key resent, charged once", sagaCrashAfterStep},
		{"saga-compensation-race", "15", "compensation while its action is in flight: never overtakes it; late action refused", sagaCompensationRace},
		{"saga-compensation-timeout", "16", "charges and refunds time out after happening: each refunded once", sagaCompensationTimeout},
		{"saga-duplicate-start", "17", "racing duplicate requests start one saga: one order, one charge; other body 422", sagaDuplicateStart},
		{"processes", "4,6,7,9", "worker processes SIGKILLed at random: nothing lost, nothing doubled", processes},
	}
}

// sent is what the clients saw for the orders they created.
type sent struct {
	failures
	mu       sync.Mutex
	orders   map[string]reply // key → first 201 answer
	replays  int64            // retries answered as replays
	mismatch int64            // replays that differed from the original
}

// failures collects the errors of a scenario's concurrent clients: the
// first five, enough to say what went wrong.
type failures struct {
	mu   sync.Mutex
	errs []error
}

// fail records err (safe for concurrent use).
func (f *failures) fail(err error) {
	f.mu.Lock()
	if len(f.errs) < 5 {
		f.errs = append(f.errs, err)
	}
	f.mu.Unlock()
}

// err joins the recorded errors; nil when there were none.
func (f *failures) err() error {
	f.mu.Lock()
	defer f.mu.Unlock()
	return errors.Join(f.errs...)
}

// sendOrders creates n orders through the API with r.cfg.Workers clients.
// With probability lost the first response is "lost" (read and dropped by
// the client, as a time-out after the server committed would) and the
// request is retried with the same key, which must be replayed
// byte-identically.
func (r *runner) sendOrders(ctx context.Context, e *env, n int, keyPrefix string, event func(i int) string, tenant func(i int) string, lost float64, stream uint64) *sent {
	s := &sent{orders: map[string]reply{}}
	g := newRNG(r.cfg.Seed, stream)
	next := atomic.Int64{}
	var wg sync.WaitGroup
	for range r.cfg.Workers {
		wg.Go(func() {
			for ctx.Err() == nil {
				i := int(next.Add(1)) - 1
				if i >= n {
					return
				}
				key := fmt.Sprintf("%s-%d", keyPrefix, i)
				body := orderBody(i, event(i))
				first, err := e.postOrder(ctx, tenant(i), key, body)
				if err != nil {
					s.fail(err)
					continue
				}
				if first.status != http.StatusCreated {
					s.fail(fmt.Errorf("order %s: status %d: %s", key, first.status, first.body))
					continue
				}
				if g.chance(lost) {
					again, err := e.postOrder(ctx, tenant(i), key, body)
					if err != nil {
						s.fail(err)
						continue
					}
					s.mu.Lock()
					s.replays++
					if again.status != first.status || !again.replayed || !bytes.Equal(again.body, first.body) ||
						again.header.Get("Location") != first.header.Get("Location") {
						s.mismatch++
					}
					s.mu.Unlock()
				}
				s.mu.Lock()
				s.orders[key] = first
				s.mu.Unlock()
			}
		})
	}
	wg.Wait()
	return s
}

func events5(i int) string { return fmt.Sprintf("concert-%d", i%5) }
func public(int) string    { return "" }

// pipelineResult fills res from the facts for n intended orders.
func pipelineResult(res *Result, f facts, n int, extraExpected, extraObserved string, ok bool) {
	res.Expected = fmt.Sprintf("orders=invoices=emails=provider_unique=%d%s", n, extraExpected)
	res.Observed = f.String() + extraObserved
	res.Lost = f.lost()
	res.Pass = ok && int(f.orders) == n && f.converged() && f.strayEmails == 0 && f.strayInvoices == 0
}

func lostResponse(ctx context.Context, r *runner, res *Result) error {
	n := r.cfg.Orders
	e, err := r.newEnv(ctx, "lost-response", true, nil)
	if err != nil {
		return err
	}
	defer e.close()
	s := r.sendOrders(ctx, e, n, "lost", events5, public, r.cfg.Duplicates, 1)
	f, serr := e.settle(ctx, facts.converged)
	res.DuplicatesSuppressed = dups(f.stats)
	pipelineResult(res, f, n, " replays_equal=all", fmt.Sprintf(" replays=%d unequal=%d", s.replays, s.mismatch),
		s.err() == nil && s.mismatch == 0 && len(s.orders) == n)
	return errors.Join(s.err(), serr)
}

func racingDuplicates(ctx context.Context, r *runner, res *Result) error {
	m := r.small(res)
	const racers = 4
	e, err := r.newEnv(ctx, "racing-duplicates", true, nil)
	if err != nil {
		return err
	}
	defer e.close()
	var bad, conflicts, replays atomic.Int64
	var errs sent
	for i := range m {
		key := fmt.Sprintf("race-%d", i)
		body := orderBody(i, events5(i))
		answers := make([]reply, racers)
		var wg sync.WaitGroup
		gate := make(chan struct{})
		for j := range racers {
			wg.Go(func() {
				<-gate
				a, err := e.postOrder(ctx, "", key, body)
				if err != nil {
					errs.fail(err)
				}
				answers[j] = a
			})
		}
		close(gate)
		wg.Wait()
		var orig []byte
		for _, a := range answers {
			switch a.status {
			case http.StatusCreated:
				if a.replayed {
					replays.Add(1)
				}
				if orig == nil {
					orig = a.body
				} else if !bytes.Equal(orig, a.body) {
					bad.Add(1)
				}
			case http.StatusConflict:
				conflicts.Add(1)
			default:
				bad.Add(1)
			}
		}
		later, err := e.postOrder(ctx, "", key, body)
		if err != nil {
			errs.fail(err)
		} else if later.status != http.StatusCreated || !later.replayed || (orig != nil && !bytes.Equal(orig, later.body)) {
			bad.Add(1)
		}
	}
	f, serr := e.settle(ctx, facts.converged)
	res.DuplicatesSuppressed = dups(f.stats)
	pipelineResult(res, f, m, " unexpected_answers=0", fmt.Sprintf(" replays=%d 409s=%d unexpected_answers=%d", replays.Load(), conflicts.Load(), bad.Load()),
		bad.Load() == 0 && errs.err() == nil)
	return errors.Join(errs.err(), serr)
}

func keyReuse(ctx context.Context, r *runner, res *Result) error {
	m := r.small(res)
	e, err := r.newEnv(ctx, "key-reuse", true, nil)
	if err != nil {
		return err
	}
	defer e.close()
	s := r.sendOrders(ctx, e, m, "reuse", events5, public, 0, 3)
	var unprocessable, bad int64
	for i := range m {
		key := fmt.Sprintf("reuse-%d", i)
		other := orderBody(i+1, events5(i)) // different seats and amount
		a, err := e.postOrder(ctx, "", key, other)
		if err != nil {
			return err
		}
		if a.status == http.StatusUnprocessableEntity && a.header.Get("Content-Type") == "application/problem+json" {
			unprocessable++
		} else {
			bad++
		}
		same, err := e.postOrder(ctx, "", key, orderBody(i, events5(i)))
		if err != nil {
			return err
		}
		if !same.replayed || !bytes.Equal(same.body, s.orders[key].body) {
			bad++
		}
	}
	var seats int64
	if err := e.sys.DB().Pool().QueryRow(ctx, `SELECT coalesce(sum(seats), 0) FROM orders`).Scan(&seats); err != nil {
		return err
	}
	var want int64
	for i := range m {
		want += int64(1 + i%4)
	}
	f, serr := e.settle(ctx, facts.converged)
	res.DuplicatesSuppressed = dups(f.stats)
	pipelineResult(res, f, m, fmt.Sprintf(" 422s=%d seats=%d", m, want), fmt.Sprintf(" 422s=%d seats=%d other=%d", unprocessable, seats, bad),
		s.err() == nil && unprocessable == int64(m) && bad == 0 && seats == want)
	return errors.Join(s.err(), serr)
}

// dropAcks wraps a subscriber so that some Acks are skipped: the process
// "crashed" after its commit and before the ack.
type dropAcks struct {
	broker.Subscriber
	g       *rng
	p       float64
	dropped *atomic.Int64
}

func (d *dropAcks) Fetch(ctx context.Context, max int, wait time.Duration) ([]broker.Delivery, error) {
	ds, err := d.Subscriber.Fetch(ctx, max, wait)
	for i, x := range ds {
		ds[i] = &dropAck{Delivery: x, s: d}
	}
	return ds, err
}

type dropAck struct {
	broker.Delivery
	s *dropAcks
}

func (d *dropAck) Ack(ctx context.Context) error {
	if d.s.g.chance(d.s.p) {
		d.s.dropped.Add(1)
		return nil // crash: the commit happened, the ack never left
	}
	return d.Delivery.Ack(ctx)
}

func crashBeforeAck(ctx context.Context, r *runner, res *Result) error {
	n := max(r.cfg.Orders/2, 1)
	var dropped atomic.Int64
	g := newRNG(r.cfg.Seed, 4)
	e, err := r.newEnv(ctx, "crash-before-ack", true, func(o *boxoffice.Options) {
		o.Hooks.WrapSubscriber = func(_ string, s broker.Subscriber) broker.Subscriber {
			return &dropAcks{Subscriber: s, g: g, p: r.cfg.Crash, dropped: &dropped}
		}
	})
	if err != nil {
		return err
	}
	defer e.close()
	s := r.sendOrders(ctx, e, n, "crash", events5, public, 0, 4)
	inboxDups := func(st boxoffice.Stats) int64 {
		return st.DuplicatesSuppressed[boxoffice.ConsumerNotification] + st.DuplicatesSuppressed[boxoffice.ConsumerBilling] + st.DuplicatesSuppressed[boxoffice.ConsumerSearch]
	}
	f, serr := e.settle(ctx, func(f facts) bool { return f.converged() && inboxDups(f.stats) >= dropped.Load() })
	res.DuplicatesSuppressed = dups(f.stats)
	pipelineResult(res, f, n, fmt.Sprintf(" inbox_duplicates>=%d", dropped.Load()), fmt.Sprintf(" inbox_duplicates=%d", inboxDups(f.stats)),
		s.err() == nil && inboxDups(f.stats) >= dropped.Load())
	return errors.Join(s.err(), serr)
}

func webhookReplay(ctx context.Context, r *runner, res *Result) error {
	m := r.small(res)
	e, err := r.newEnv(ctx, "webhook-replay", true, nil)
	if err != nil {
		return err
	}
	defer e.close()
	s := r.sendOrders(ctx, e, m, "pay", events5, public, 0, 5)
	if err := s.err(); err != nil {
		return err
	}
	var accepted, replayOK, bad atomic.Int64
	i := 0
	// A forged delivery first: 401, nothing recorded.
	for _, o := range s.orders {
		var ord boxoffice.Order
		if err := json.Unmarshal(o.body, &ord); err != nil {
			return err
		}
		if i == 0 {
			a, err := e.sendPayment(ctx, "msg_forged", ord.OrderID, false)
			if err != nil {
				return err
			}
			if a.status != http.StatusUnauthorized {
				bad.Add(1)
			}
		}
		i++
		id := "msg_" + ord.OrderID
		a, err := e.sendPayment(ctx, id, ord.OrderID, true)
		if err != nil {
			return err
		}
		if a.status == http.StatusAccepted {
			accepted.Add(1)
		} else {
			bad.Add(1)
		}
		var wg sync.WaitGroup
		for range 4 { // two sequential-ish and concurrent replays
			wg.Go(func() {
				a, err := e.sendPayment(ctx, id, ord.OrderID, true)
				if err == nil && a.status == http.StatusOK {
					replayOK.Add(1)
				} else {
					bad.Add(1)
				}
			})
		}
		wg.Wait()
	}
	f, serr := e.settle(ctx, facts.converged)
	res.DuplicatesSuppressed = dups(f.stats)
	res.Expected = fmt.Sprintf("payments=paid=%d replays_2xx=%d forged_401=1", m, 4*m)
	res.Observed = fmt.Sprintf("payments=%d paid=%d replays_2xx=%d first_202=%d other=%d", f.payments, f.paid, replayOK.Load(), accepted.Load(), bad.Load())
	res.Lost = f.lost() + int64(m) - f.payments
	res.Pass = f.payments == int64(m) && f.paid == int64(m) && replayOK.Load() == int64(4*m) && accepted.Load() == int64(m) && bad.Load() == 0 && f.converged()
	return serr
}

// faultyPublisher loses broker acks: the batch is stored, the relay sees
// an error and publishes it again. Some faults also republish the batch
// after the broker's duplicate window, so the copies reach the consumers.
type faultyPublisher struct {
	broker.Publisher
	g            *rng
	p            float64
	lostAcks     atomic.Int64
	late         atomic.Int64
	lateBudget   atomic.Int64
	lateCopyWait time.Duration
	started      atomic.Bool
}

var errAckLost = errors.New("drill: broker ack lost")

func (f *faultyPublisher) Publish(ctx context.Context, msgs ...idem.Message) error {
	if err := f.Publisher.Publish(ctx, msgs...); err != nil {
		return err
	}
	// The first batch always loses its ack, so every run republishes.
	if !f.started.CompareAndSwap(false, true) && !f.g.chance(f.p) {
		return nil
	}
	f.lostAcks.Add(int64(len(msgs)))
	if f.lateBudget.Add(-1) >= 0 {
		time.Sleep(f.lateCopyWait)
		if err := f.Publisher.Publish(ctx, msgs...); err == nil {
			f.late.Add(int64(len(msgs)))
		}
	}
	return errAckLost
}

func relayDoublePublish(ctx context.Context, r *runner, res *Result) error {
	m := r.small(res) * 2
	res.Orders = m
	fp := &faultyPublisher{g: newRNG(r.cfg.Seed, 6), p: max(r.cfg.Crash, 0.05)}
	if r.brokerDedups() {
		// JetStream drops the relay's republish inside its duplicate
		// window: a few copies are sent after it, so the inboxes are tested
		// too. Kafka and RabbitMQ have no such window: every republish
		// reaches the consumers already.
		fp.lateCopyWait = duplicateWindow + 200*time.Millisecond
		fp.lateBudget.Store(3)
	}
	e, err := r.newEnv(ctx, "relay-double-publish", true, func(o *boxoffice.Options) {
		o.Hooks.WrapPublisher = func(p broker.Publisher) broker.Publisher { fp.Publisher = p; return fp }
	})
	if err != nil {
		return err
	}
	defer e.close()
	s := r.sendOrders(ctx, e, m, "relay", events5, public, 0, 6)
	inboxDupsOf := func(f facts) int64 {
		d := f.stats.DuplicatesSuppressed
		return d[boxoffice.ConsumerBilling] + d[boxoffice.ConsumerNotification] + d[boxoffice.ConsumerSearch]
	}
	// Without a dedup window, wait for the copies too: they may still be
	// on their way when the effects converged.
	f, serr := e.settle(ctx, func(f facts) bool {
		return f.converged() && (r.brokerDedups() || inboxDupsOf(f) >= 3*(fp.lostAcks.Load()+fp.late.Load()))
	})
	res.DuplicatesSuppressed = dups(f.stats)
	d := f.stats.DuplicatesSuppressed
	republished := fp.lostAcks.Load() + fp.late.Load()
	inboxDups := inboxDupsOf(f)
	expected, ok := fmt.Sprintf(" republished=%d", republished), s.err() == nil
	if !r.brokerDedups() {
		// No publish dedup on Kafka or RabbitMQ: every republished copy is
		// delivered to each of the three consumers, whose inboxes absorb
		// it.
		expected += fmt.Sprintf(" broker_dups=0 (no dedup window: each consumer's inbox absorbs every copy) inbox_dups>=%d>0", 3*republished)
		ok = ok && d["broker"] == 0 && republished > 0 && inboxDups >= 3*republished
	}
	pipelineResult(res, f, m, expected,
		fmt.Sprintf(" republished=%d broker_dups=%d inbox_dups=%d", republished, d["broker"], inboxDups), ok)
	return errors.Join(s.err(), serr)
}

func workerCrash(ctx context.Context, r *runner, res *Result) error {
	m := r.small(res)
	g := newRNG(r.cfg.Seed, 7)
	var crashed atomic.Int64
	seen := sync.Map{}
	e, err := r.newEnv(ctx, "worker-crash-after-call", true, func(o *boxoffice.Options) {
		o.Hooks.WrapPerformer = func(p effect.Performer) effect.Performer {
			return func(ctx context.Context, key string, payload []byte) ([]byte, error) {
				out, err := p(ctx, key, payload)
				if err == nil && g.chance(max(r.cfg.Crash, 0.2)) {
					if _, again := seen.LoadOrStore(key, true); !again {
						crashed.Add(1)
						return nil, errors.New("drill: worker crashed after the provider call, before recording completion")
					}
				}
				return out, err
			}
		}
	})
	if err != nil {
		return err
	}
	defer e.close()
	s := r.sendOrders(ctx, e, m, "effect", events5, public, 0, 7)
	f, serr := e.settle(ctx, facts.converged)
	res.DuplicatesSuppressed = dups(f.stats)
	pipelineResult(res, f, m, fmt.Sprintf(" provider_calls>=%d", int64(m)+crashed.Load()), fmt.Sprintf(" provider_calls=%d crashes=%d", f.providerCalls, crashed.Load()),
		s.err() == nil && f.providerCalls >= int64(m)+crashed.Load())
	return errors.Join(s.err(), serr)
}

// clock is a settable clock for expiry.
type clock struct{ offset atomic.Int64 }

func (c *clock) now() time.Time          { return time.Now().Add(time.Duration(c.offset.Load())) }
func (c *clock) advance(d time.Duration) { c.offset.Add(int64(d)) }

func expiryLateRetry(ctx context.Context, r *runner, res *Result) error {
	m := r.small(res)
	c := &clock{}
	rec := &recordingPublisher{}
	e, err := r.newEnv(ctx, "expiry-late-retry", true, func(o *boxoffice.Options) {
		o.Now = c.now
		o.Hooks.WrapPublisher = func(p broker.Publisher) broker.Publisher { rec.Publisher = p; return rec }
	})
	if err != nil {
		return err
	}
	defer e.close()
	s := r.sendOrders(ctx, e, m, "late", events5, public, 0, 8)
	if err := s.err(); err != nil {
		return err
	}
	if _, err := e.settle(ctx, facts.converged); err != nil {
		return err
	}
	old := rec.taken() // the m events, as the relay published them
	// Eight days later: past the HTTP key retention (24h) and the inbox
	// retention (7 days). The GC deletes the expired records.
	c.advance(8 * 24 * time.Hour)
	gc, err := retention.New(e.sys.DB(), retention.Config{Now: c.now, Logger: e.sys.Config().Logger})
	if err != nil {
		return err
	}
	rep, err := gc.RunOnce(ctx)
	if err != nil {
		return err
	}
	// A genuine late retry of every request: executed as new.
	var fresh, bad int64
	for i := range m {
		key := fmt.Sprintf("late-%d", i)
		a, err := e.postOrder(ctx, "", key, orderBody(i, events5(i)))
		if err != nil {
			return err
		}
		if a.status == http.StatusCreated && !a.replayed && !bytes.Equal(a.body, s.orders[key].body) {
			fresh++
		} else {
			bad++
		}
	}
	// A late redelivery of every event (a consumer reset to the start of
	// the stream: on JetStream and Kafka a new durable or consumer group
	// reads from the oldest message kept) after the inbox forgot them:
	// business keys hold.
	if err := e.declareDurables("-late"); err != nil {
		return err
	}
	late, err := e.addSystem(ctx, func(c *boxoffice.Config) {
		c.Roles = []boxoffice.Role{boxoffice.RoleNotification, boxoffice.RoleBilling, boxoffice.RoleSearch}
		c.DurableSuffix = "-late"
	})
	if err != nil {
		return err
	}
	redelivered := ""
	if r.cfg.broker() == brokerRabbitMQ {
		// RabbitMQ replays nothing beyond the queue: the late redelivery
		// is the old events published again, to every queue.
		pub, err := e.sys.Config().Broker.Publisher()
		if err != nil {
			return err
		}
		err = pub.Publish(ctx, old...)
		pub.Close()
		if err != nil {
			return err
		}
		redelivered = fmt.Sprintf(" (RabbitMQ: no replay beyond the queue, the %d old events republished)", len(old))
	}
	f, serr := e.settle(ctx, func(f facts) bool {
		if !f.converged() {
			return false
		}
		// Every consumer recorded all 2m events (billing's ids are the 2m
		// orders' invoice keys).
		by, err := operator.InboxCountsByConsumer(ctx, e.sys.DB())
		if err != nil {
			return false
		}
		for _, consumer := range []string{boxoffice.ConsumerNotification, boxoffice.ConsumerBilling, boxoffice.ConsumerSearch} {
			if by[consumer] < int64(2*m) {
				return false
			}
		}
		return true
	})
	lst, _ := late.Stats(ctx)
	res.DuplicatesSuppressed = dups(f.stats) + dups(lst)
	pipelineResult(res, f, 2*m, fmt.Sprintf(" (%d late retries run as new) gc_deleted>0%s", m, redelivered),
		fmt.Sprintf(" late_new=%d other=%d gc_deleted=%d", fresh, bad, rep.Total()), fresh == int64(m) && bad == 0 && rep.Total() > 0)
	return serr
}

func concurrentDelivery(ctx context.Context, r *runner, res *Result) error {
	m := r.small(res)
	e, err := r.newEnv(ctx, "concurrent-delivery", true, func(o *boxoffice.Options) { o.DurableSuffix = "-a" })
	if err != nil {
		return err
	}
	defer e.close()
	if err := e.declareDurables("-b"); err != nil {
		return err
	}
	b, err := e.addSystem(ctx, func(c *boxoffice.Config) {
		c.Roles = []boxoffice.Role{boxoffice.RoleNotification, boxoffice.RoleBilling, boxoffice.RoleSearch}
		c.DurableSuffix = "-b"
	})
	if err != nil {
		return err
	}
	s := r.sendOrders(ctx, e, m, "twice", events5, public, 0, 9)
	inboxDups := func(st boxoffice.Stats) int64 {
		return st.DuplicatesSuppressed[boxoffice.ConsumerNotification] + st.DuplicatesSuppressed[boxoffice.ConsumerBilling] + st.DuplicatesSuppressed[boxoffice.ConsumerSearch]
	}
	var total int64
	f, serr := e.settle(ctx, func(f facts) bool {
		bs, err := b.Stats(ctx)
		if err != nil {
			return false
		}
		total = inboxDups(f.stats) + inboxDups(bs)
		return f.converged() && total >= int64(3*m)
	})
	res.DuplicatesSuppressed = total
	pipelineResult(res, f, m, fmt.Sprintf(" inbox_duplicates>=%d", 3*m), fmt.Sprintf(" inbox_duplicates=%d", total), s.err() == nil && total >= int64(3*m))
	return errors.Join(s.err(), serr)
}

func transientPermanentDLQ(ctx context.Context, r *runner, res *Result) error {
	m := r.small(res)
	const poison = 5
	var bug atomic.Bool
	bug.Store(true)
	var transient atomic.Int64
	e, err := r.newEnv(ctx, "transient-permanent-dlq", true, func(o *boxoffice.Options) {
		o.Hooks.Fault = func(consumer string, oc boxoffice.OrderConfirmed, msg idem.Message) error {
			if consumer != boxoffice.ConsumerBilling {
				return nil
			}
			switch {
			case oc.EventID == "flaky" && msg.Attempt <= 2:
				transient.Add(1)
				return errors.New("drill: billing database hiccup")
			case oc.EventID == "buggy" && bug.Load():
				return idem.Permanent(errors.New("drill: billing bug rejects the order"))
			}
			return nil
		}
	})
	if err != nil {
		return err
	}
	defer e.close()
	kind := func(i int) string {
		switch i % 5 {
		case 0:
			return "flaky"
		case 1:
			return "buggy"
		}
		return "steady"
	}
	buggy := 0
	for i := range m {
		if kind(i) == "buggy" {
			buggy++
		}
	}
	s := r.sendOrders(ctx, e, m, "dlq", kind, public, 0, 10)
	if err := s.err(); err != nil {
		return err
	}
	pub, err := e.sys.Config().Broker.Publisher()
	if err != nil {
		return err
	}
	defer pub.Close()
	for i := range poison {
		payload := []byte(`{"order_id": 42, "garbage": true`)
		typ := boxoffice.EventTypeOrderConfirmed
		if i%2 == 1 {
			payload, typ = []byte(`{"order_id":"ord_x"}`), "OrderCancelled"
		}
		if err := pub.Publish(ctx, idem.Message{ID: fmt.Sprintf("poison-%d", i), Subject: e.sys.Config().Subject,
			Headers: map[string]string{"ce-type": typ, "ce-source": "drill", "ce-specversion": "1.0"}, Payload: payload}); err != nil {
			return err
		}
	}
	wantParked := int64(3*poison + buggy)
	f, err := e.settle(ctx, func(f facts) bool {
		return f.parked == wantParked && f.invoices == int64(m-buggy) && f.emails == int64(m) && f.providerUnique == int64(m) && f.projectionOff == 0
	})
	if err != nil {
		return err
	}
	parkedBefore := f.parked
	// The fix ships; the operator redrives billing's rejected letters at
	// once: JetStream dedups a redrive under its own id, so its duplicate
	// window does not swallow it (Kafka and RabbitMQ have none).
	bug.Store(false)
	letters, err := e.sys.DeadLetters().List(ctx, dlq.Filter{Consumer: boxoffice.ConsumerBilling, ErrorClass: "permanent", State: dlq.Parked, Limit: -1})
	if err != nil {
		return err
	}
	for _, l := range letters {
		if _, err := e.sys.DeadLetters().Redrive(ctx, l.ID, "drill", pub); err != nil {
			return err
		}
	}
	f, serr := e.settle(ctx, func(f facts) bool { return f.converged() && f.parked == int64(3*poison) })
	// A second redrive of the same letters is refused and changes nothing.
	refused := 0
	for _, l := range letters {
		if _, err := e.sys.DeadLetters().Redrive(ctx, l.ID, "drill", pub); errors.Is(err, dlq.ErrNotParked) {
			refused++
		}
	}
	time.Sleep(200 * time.Millisecond)
	f2, err := e.facts(ctx)
	if err != nil {
		return err
	}
	res.DuplicatesSuppressed = dups(f2.stats)
	pipelineResult(res, f2, m, fmt.Sprintf(" dlq=%d→%d(poison) redriven=%d second_redrive_refused=%d", wantParked, 3*poison, buggy, buggy),
		fmt.Sprintf(" dlq=%d→%d redriven=%d second_redrive_refused=%d transient_retries=%d", parkedBefore, f2.parked, len(letters), refused, transient.Load()),
		len(letters) == buggy && refused == buggy && f2.parked == int64(3*poison) && f2.invoices == int64(m) && transient.Load() > 0)
	return serr
}

// reversingPublisher publishes each batch in reverse order: events of
// different orders (different ordering keys) may legally arrive in any
// order, and the search projection must keep the newest availability.
type reversingPublisher struct{ broker.Publisher }

func (p reversingPublisher) Publish(ctx context.Context, msgs ...idem.Message) error {
	rev := make([]idem.Message, len(msgs))
	for i, m := range msgs {
		rev[len(msgs)-1-i] = m
	}
	return p.Publisher.Publish(ctx, rev...)
}

func outOfOrder(ctx context.Context, r *runner, res *Result) error {
	m := r.small(res)
	e, err := r.newEnv(ctx, "out-of-order", true, func(o *boxoffice.Options) {
		o.Roles = []boxoffice.Role{boxoffice.RoleAPI, boxoffice.RoleNotification, boxoffice.RoleBilling, boxoffice.RoleSearch, boxoffice.RoleEffects}
	})
	if err != nil {
		return err
	}
	defer e.close()
	s := r.sendOrders(ctx, e, m, "ooo", func(int) string { return "one-night-only" }, public, 0, 11)
	if err := s.err(); err != nil {
		return err
	}
	// Only now does a relay start: it finds every event and publishes the
	// batches reversed, newest availability first.
	if _, err := e.addSystem(ctx, func(c *boxoffice.Config) {
		c.Roles = []boxoffice.Role{boxoffice.RoleRelay}
		c.Hooks.WrapPublisher = func(p broker.Publisher) broker.Publisher { return reversingPublisher{p} }
	}); err != nil {
		return err
	}
	f, serr := e.settle(ctx, facts.converged)
	var version, left int64
	if err := e.sys.DB().Pool().QueryRow(ctx, `SELECT version, seats_left FROM event_availability WHERE event_id = 'one-night-only'`).Scan(&version, &left); err != nil {
		return errors.Join(serr, err)
	}
	var sold int64
	for i := range m {
		sold += int64(1 + i%4)
	}
	stale := e.sys.StaleUpdates()
	res.DuplicatesSuppressed = dups(f.stats) + stale
	pipelineResult(res, f, m, fmt.Sprintf(" version=%d seats_left=%d stale>0", m, 1_000_000-sold),
		fmt.Sprintf(" version=%d seats_left=%d stale=%d", version, left, stale),
		version == int64(m) && left == 1_000_000-sold && stale > 0)
	return serr
}

func providerTimeout(ctx context.Context, r *runner, res *Result) error {
	m := r.small(res)
	k := min(max(3, int(float64(m)*r.cfg.Crash)), 20)
	e, err := r.newEnv(ctx, "provider-timeout", true, func(o *boxoffice.Options) {
		o.EffectCallTimeout = 500 * time.Millisecond
	})
	if err != nil {
		return err
	}
	defer e.close()
	e.sys.Provider().TimeoutAfterEffect(k)
	s := r.sendOrders(ctx, e, m, "timeout", events5, public, 0, 12)
	f, serr := e.settle(ctx, facts.converged)
	res.DuplicatesSuppressed = dups(f.stats)
	pipelineResult(res, f, m, fmt.Sprintf(" provider_calls>=%d", m+k), fmt.Sprintf(" provider_calls=%d timeouts=%d", f.providerCalls, k),
		s.err() == nil && f.providerCalls >= int64(m+k))
	return errors.Join(s.err(), serr)
}

func replayEquivalence(ctx context.Context, r *runner, res *Result) error {
	m := r.small(res)
	e, err := r.newEnv(ctx, "replay-equivalence", true, nil)
	if err != nil {
		return err
	}
	defer e.close()
	tenant := func(i int) string { return []string{"acme", "globex"}[i%2] }
	s := r.sendOrders(ctx, e, m, "same", events5, tenant, 0, 13)
	if err := s.err(); err != nil {
		return err
	}
	var equal, isolated, bad int64
	for i := range m {
		key := fmt.Sprintf("same-%d", i)
		orig := s.orders[key]
		again, err := e.postOrder(ctx, tenant(i), key, orderBody(i, events5(i)))
		if err != nil {
			return err
		}
		var a, b, g map[string]any
		_ = json.Unmarshal(orig.body, &a)
		_ = json.Unmarshal(again.body, &b)
		get, err := e.do(ctx, http.MethodGet, orig.header.Get("Location"), tenant(i), "", nil, nil)
		if err != nil {
			return err
		}
		_ = json.Unmarshal(get.body, &g)
		if again.status == orig.status && again.replayed && bytes.Equal(again.body, orig.body) &&
			again.header.Get("Location") == orig.header.Get("Location") && fmt.Sprint(a) == fmt.Sprint(b) && fmt.Sprint(a) == fmt.Sprint(g) {
			equal++
		} else {
			bad++
		}
		other, err := e.do(ctx, http.MethodGet, orig.header.Get("Location"), tenant(i+1), "", nil, nil)
		if err != nil {
			return err
		}
		if other.status == http.StatusNotFound {
			isolated++
		}
	}
	f, serr := e.settle(ctx, facts.converged)
	res.DuplicatesSuppressed = dups(f.stats)
	pipelineResult(res, f, m, fmt.Sprintf(" replays_equal=%d other_tenant_404=%d", m, m), fmt.Sprintf(" replays_equal=%d other_tenant_404=%d", equal, isolated),
		equal == int64(m) && isolated == int64(m) && bad == 0)
	return serr
}

// recordingPublisher keeps a copy of every message published successfully
// (the events the relay put on the broker), for a late redelivery.
type recordingPublisher struct {
	broker.Publisher
	mu   sync.Mutex
	msgs []idem.Message
}

func (p *recordingPublisher) Publish(ctx context.Context, msgs ...idem.Message) error {
	err := p.Publisher.Publish(ctx, msgs...)
	if err == nil {
		p.mu.Lock()
		p.msgs = append(p.msgs, msgs...)
		p.mu.Unlock()
	}
	return err
}

// taken returns the messages recorded so far, each id once.
func (p *recordingPublisher) taken() []idem.Message {
	p.mu.Lock()
	defer p.mu.Unlock()
	seen := map[string]bool{}
	var out []idem.Message
	for _, m := range p.msgs {
		if !seen[m.ID] {
			seen[m.ID] = true
			out = append(out, m)
		}
	}
	return out
}
