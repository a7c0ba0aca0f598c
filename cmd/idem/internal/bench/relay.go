package bench

import (
	"context"
	"fmt"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/google/uuid"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/broker"
	"github.com/idemkit/idem/outbox"
	"github.com/idemkit/idem/store"
)

// latencyRate is the fixed event rate of the outbox_relay latency phase,
// whose first latencyWarm events (a fifth of a second) are not counted.
const (
	latencyRate = 1000
	latencyWarm = latencyRate / 5
)

// relaySource is the CloudEvents source of the relay pair's events (the
// outbox's default).
const relaySource = "idem"

// enqueueN commits n events for topic into ob, 500 per transaction.
func enqueueN[TTx any](ctx context.Context, d store.Driver[TTx], ob *outbox.Outbox[TTx], topic string, n int) error {
	for i := 0; i < n; i += 500 {
		evs := make([]outbox.Event, 0, 500)
		for range min(500, n-i) {
			evs = append(evs, outbox.Event{Type: "bench.order.created", Topic: topic, Payload: payload})
		}
		if err := store.InTx(ctx, d, func(tx TTx) error {
			_, err := ob.EnqueueTx(ctx, tx, evs...)
			return err
		}); err != nil {
			return err
		}
	}
	return nil
}

// runningRelay is a relay started for one round, counting what it
// published and recording when each event id was acknowledged.
type runningRelay[TTx any] struct {
	r         *outbox.Relay[TTx]
	published atomic.Int64
	acked     sync.Map // event id → time.Time, when recordAcks is set
	record    atomic.Bool
	stop      context.CancelFunc
	done      chan error
}

// startRelay starts a relay on d; opts adjust its configuration.
func startRelay[TTx any](ctx context.Context, d store.Driver[TTx], pub broker.Publisher, opts ...func(*outbox.RelayConfig)) (*runningRelay[TTx], error) {
	rr := &runningRelay[TTx]{done: make(chan error, 1)}
	cfg := outbox.RelayConfig{
		OnPublished: func(_ context.Context, evs []outbox.Event) {
			if rr.record.Load() {
				now := time.Now()
				for _, ev := range evs {
					rr.acked.Store(ev.ID, now)
				}
			}
			rr.published.Add(int64(len(evs)))
		},
		OnParked: func(_ context.Context, ev outbox.Event, err error) {
			select {
			case rr.done <- fmt.Errorf("relay parked event %s: %w", ev.ID, err):
			default:
			}
		},
	}
	for _, o := range opts {
		o(&cfg)
	}
	r, err := outbox.NewRelay(d, pub, cfg)
	if err != nil {
		return nil, err
	}
	rr.r = r
	rctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	rr.stop = cancel
	go func() {
		if err := r.Run(rctx); err != nil {
			select {
			case rr.done <- err:
			default:
			}
		}
	}()
	return rr, nil
}

// waitPublished waits until the relay published n events in total.
func (rr *runningRelay[TTx]) waitPublished(ctx context.Context, n int64) error {
	for rr.published.Load() < n {
		select {
		case err := <-rr.done:
			return err
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(time.Millisecond):
		}
	}
	return nil
}

// relayDrain commits n events for a fresh stream named after prefix
// (untimed), then times a relay publishing all of them.
func relayDrain[TTx any](ctx context.Context, e *Env, d store.Driver[TTx], ob *outbox.Outbox[TTx], prefix string, n int, opts ...func(*outbox.RelayConfig)) (Sample, error) {
	topic, pub, err := e.streamPublisher(ctx, prefix)
	if err != nil {
		return Sample{}, err
	}
	if err := enqueueN(ctx, d, ob, topic, n); err != nil {
		return Sample{}, err
	}
	start := time.Now()
	rr, err := startRelay(ctx, d, pub, opts...)
	if err != nil {
		return Sample{}, err
	}
	defer rr.stop()
	if err := rr.waitPublished(ctx, int64(n)); err != nil {
		return Sample{}, err
	}
	return Sample{Ops: n, Elapsed: time.Since(start)}, nil
}

// outboxRelayDeleteVsMark: A drains N committed events to JetStream
// through a relay that deletes each published row
// (RelayConfig.DeletePublished), B the same through the default relay,
// which marks it completed; both timed from the relay's start until the
// last event is acked and recorded.
func outboxRelayDeleteVsMark[TTx any](e *Env, ns func(context.Context) (store.Driver[TTx], error), storeName string) Pair {
	var (
		d          store.Driver[TTx]
		ob         *outbox.Outbox[TTx]
		estA, estB = 10000.0, 10000.0
	)
	p := Pair{Name: "outbox_relay_delete_vs_mark_" + storeName}
	p.Setup = func(ctx context.Context) (err error) {
		if d, err = ns(ctx); err != nil {
			return err
		}
		ob, err = outbox.New(d, outbox.Config{Source: relaySource})
		return err
	}
	drain := func(est *float64, label string, opts ...func(*outbox.RelayConfig)) Side {
		return Side{Label: label, Run: func(ctx context.Context, budget time.Duration) (Sample, error) {
			s, err := relayDrain(ctx, e, d, ob, "relay-"+label, max(1000, int(*est*budget.Seconds()*0.8)), opts...)
			if err == nil {
				*est = s.PerSecond()
			}
			return s, err
		}}
	}
	p.A = drain(&estA, "delete", func(c *outbox.RelayConfig) { c.DeletePublished = true })
	p.B = drain(&estB, "mark")
	return p
}

// outboxRelay: A publishes N committed outbox events to JetStream through
// the relay (timed from the relay's start until the last event is acked
// and marked published), then measures commit-to-publish latency at a
// fixed 1,000 events/s after a warm-up; B publishes the same number of
// messages straight to JetStream (the broker's own ceiling, no database):
// the messages the relay would publish for those events, with their
// CloudEvents headers, so that the ratio measures what the database work
// costs the relay.
func outboxRelay[TTx any](e *Env, ns func(context.Context) (store.Driver[TTx], error), storeName string) Pair {
	var (
		d          store.Driver[TTx]
		ob         *outbox.Outbox[TTx]
		estA, estB = 10000.0, 30000.0
		seq        atomic.Int64
	)
	p := Pair{Name: "outbox_relay_" + storeName}
	p.Setup = func(ctx context.Context) (err error) {
		if d, err = ns(ctx); err != nil {
			return err
		}
		ob, err = outbox.New(d, outbox.Config{Source: relaySource})
		return err
	}
	p.A = Side{Label: "relay", Run: func(ctx context.Context, budget time.Duration) (Sample, error) {
		topic, pub, err := e.streamPublisher(ctx, "relay")
		if err != nil {
			return Sample{}, err
		}
		n := max(1000, int(estA*budget.Seconds()*0.6))
		if err := enqueueN(ctx, d, ob, topic, n); err != nil {
			return Sample{}, err
		}
		start := time.Now()
		rr, err := startRelay(ctx, d, pub)
		if err != nil {
			return Sample{}, err
		}
		defer rr.stop()
		if err := rr.waitPublished(ctx, int64(n)); err != nil {
			return Sample{}, err
		}
		s := Sample{Ops: n, Elapsed: time.Since(start)}
		estA = s.PerSecond()

		// Latency at a fixed rate: 4 producers, event i due at t0 + i/rate.
		// The first latencyWarm events are a warm-up and not counted: they
		// measure the harness starting (the pool opening the producers'
		// connections; before the relay claimed on its own connection, its
		// next claim waited 27-109 ms for pgxpool to open one), not the
		// relay at 1,000 events/s.
		rr.record.Store(true)
		total := max(200, int(budget.Seconds()*0.4*latencyRate))
		var committed sync.Map
		var next atomic.Int64
		var wg sync.WaitGroup
		errc := make(chan error, 4)
		t0 := time.Now()
		for range 4 {
			wg.Go(func() {
				for {
					i := next.Add(1) - 1
					if i >= int64(latencyWarm+total) {
						return
					}
					time.Sleep(time.Until(t0.Add(time.Duration(i) * time.Second / latencyRate)))
					id := "lat-" + e.runID + "-" + strconv.FormatInt(seq.Add(1), 10)
					err := store.InTx(ctx, d, func(tx TTx) error {
						_, err := ob.EnqueueTx(ctx, tx, outbox.Event{ID: id, Type: "bench.order.created", Topic: topic, Payload: payload})
						return err
					})
					if err != nil {
						errc <- err
						return
					}
					if i >= latencyWarm {
						committed.Store(id, time.Now())
					}
					if !d.SupportsListener() {
						rr.r.Notify() // no LISTEN/NOTIFY to wake the relay: wake it in-process
					}
				}
			})
		}
		wg.Wait()
		close(errc)
		if err := <-errc; err != nil {
			return Sample{}, err
		}
		if err := rr.waitPublished(ctx, int64(n+latencyWarm+total)); err != nil {
			return Sample{}, err
		}
		committed.Range(func(k, v any) bool {
			if at, ok := rr.acked.Load(k); ok {
				s.Latencies = append(s.Latencies, max(0, at.(time.Time).Sub(v.(time.Time))))
			}
			return true
		})
		if len(s.Latencies) != total {
			return Sample{}, fmt.Errorf("latency phase: %d of %d events seen published", len(s.Latencies), total)
		}
		return s, nil
	}}
	p.B = Side{Label: "jetstream-direct", Run: func(ctx context.Context, budget time.Duration) (Sample, error) {
		topic, pub, err := e.streamPublisher(ctx, "direct")
		if err != nil {
			return Sample{}, err
		}
		n := max(1000, int(estB*budget.Seconds()*0.6))
		// Ids of the relay's form (UUIDv7, as EnqueueTx makes them), made
		// before the clock starts: the relay's were made at enqueue.
		ids := make([]string, n)
		for i := range ids {
			ids[i] = uuid.Must(uuid.NewV7()).String()
		}
		at := time.Now() // the events' time, read from their rows by the relay
		start := time.Now()
		for i := 0; i < n; i += 256 {
			msgs := make([]idem.Message, 0, 256)
			for _, id := range ids[i:min(i+256, n)] {
				// The message the relay publishes for such an event,
				// CloudEvents headers and all, built as the relay builds
				// it (BENCHMARKS.md: such messages cost the client and the
				// server more CPU than bare ones; that is the broker's
				// work, not the database's).
				msgs = append(msgs, outbox.Event{ID: id, Source: relaySource,
					Type: "bench.order.created", Topic: topic, Payload: payload, Time: at}.Message())
			}
			if err := pub.Publish(ctx, msgs...); err != nil {
				return Sample{}, err
			}
		}
		s := Sample{Ops: n, Elapsed: time.Since(start)}
		estB = s.PerSecond()
		return s, nil
	}}
	return p
}
