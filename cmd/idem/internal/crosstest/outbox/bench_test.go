package outbox_test

import (
	"context"
	"fmt"
	"github.com/idemkit/idem/internal/lease"
	"github.com/jackc/pgx/v5"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/broker"
	"github.com/idemkit/idem/internal/testdb"
	"github.com/idemkit/idem/outbox"
	"github.com/idemkit/idem/store"
)

// BenchmarkRelayThroughput measures events/s from committed outbox rows to
// broker acks on the embedded JetStream server: b.N events (over 1,000
// ordering keys, or keyless as in idem bench; enqueued 100 per transaction
// beforehand) drained by one relay.
func BenchmarkRelayThroughput(b *testing.B) {
	for _, keys := range []int{1000, 0} {
		for _, batch := range []int{256, 512, 1000} {
			name := fmt.Sprintf("keys=%d/batch=%d", keys, batch)
			b.Run("pgx/"+name, func(b *testing.B) { benchThroughput(b, testdb.Pgx(b), keys, batch) })
			b.Run("sqlite/"+name, func(b *testing.B) { benchThroughput(b, testdb.SQLite(b), keys, batch) })
		}
	}
}

func benchThroughput[TTx any](b *testing.B, d store.Driver[TTx], keys, batch int) {
	_, pub, _ := embeddedJetStream(b)
	o, _ := outbox.New(d, outbox.Config{})
	evs := make([]outbox.Event, 0, 100)
	for i := 0; i < b.N; i += 100 {
		evs = evs[:0]
		for j := i; j < min(i+100, b.N); j++ {
			e := ev(fmt.Sprintf("k%d", j%max(keys, 1)), j)
			if keys == 0 {
				e.Key = ""
			}
			evs = append(evs, e)
		}
		enqueueTx(b, d, o, evs...)
	}
	cfg := fastRelay("bench")
	cfg.BatchSize = batch
	if batch == 0 {
		cfg.BatchSize = 0 // the default
	}
	cfg.ClaimTTL = 30 * time.Second
	done := make(chan struct{})
	published := 0
	cfg.OnPublished = func(_ context.Context, evs []outbox.Event) {
		if published += len(evs); published == b.N {
			close(done)
		}
	}
	r, _ := outbox.NewRelay(d, pub, cfg)
	b.ResetTimer()
	start := time.Now()
	stop := startRelayStop(b, r)
	<-done
	el := time.Since(start)
	b.StopTimer()
	_ = stop()
	b.ReportMetric(float64(b.N)/el.Seconds(), "events/s")
}

// ackClock wraps a publisher and records when each message id was acked.
type ackClock struct {
	broker.Publisher
	mu  sync.Mutex
	at  map[string]time.Time
	dup int
}

func (a *ackClock) Publish(ctx context.Context, msgs ...idem.Message) error {
	err := a.Publisher.Publish(ctx, msgs...)
	if err == nil {
		now := time.Now()
		a.mu.Lock()
		for _, m := range msgs {
			if _, ok := a.at[m.ID]; ok {
				a.dup++
				continue
			}
			a.at[m.ID] = now
		}
		a.mu.Unlock()
	}
	return err
}

// BenchmarkRelayLatency measures commit-to-ack latency at a steady 1,000
// events/s (one event per transaction) on PostgreSQL with LISTEN/NOTIFY
// wake-ups (poll fallback 1s) and the embedded JetStream server. It reports
// p50/p99 in ms; each iteration runs 3 s (3,000 events).
func BenchmarkRelayLatency(b *testing.B) {
	for range b.N {
		benchLatency(b)
	}
}

func benchLatency(b *testing.B) {
	b.StopTimer()
	d := testdb.Pgx(b)
	_, jpub, _ := embeddedJetStream(b)
	pub := &ackClock{Publisher: jpub, at: map[string]time.Time{}}
	o, _ := outbox.New(d, outbox.Config{})
	cfg := fastRelay("latency")
	cfg.PollInterval = time.Second
	cfg.ClaimTTL = 30 * time.Second
	r, _ := outbox.NewRelay(d, pub, cfg)
	stop := startRelayStop(b, r)
	time.Sleep(100 * time.Millisecond) // LISTEN established
	const rate, total = 1000, 3000
	var mu sync.Mutex
	committed := map[string]time.Time{}
	work := make(chan int, total)
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			for i := range work {
				var id string
				err := store.InTx(context.Background(), d, func(tx pgx.Tx) error {
					out, err := o.EnqueueTx(context.Background(), tx, ev(fmt.Sprintf("k%d", i%100), i))
					if err == nil {
						id = out[0].ID
					}
					return err
				})
				if err != nil {
					b.Error(err)
					return
				}
				now := time.Now()
				mu.Lock()
				committed[id] = now
				mu.Unlock()
			}
		})
	}
	b.StartTimer()
	tick := time.NewTicker(time.Second / rate)
	for i := range total {
		<-tick.C
		work <- i
	}
	tick.Stop()
	close(work)
	wg.Wait()
	for countState(b, d, lease.Completed) < total {
		time.Sleep(5 * time.Millisecond)
	}
	b.StopTimer()
	_ = stop()
	var lat []time.Duration
	pub.mu.Lock()
	for id, c := range committed {
		if a, ok := pub.at[id]; ok {
			lat = append(lat, max(0, a.Sub(c)))
		}
	}
	pub.mu.Unlock()
	slices.Sort(lat)
	if len(lat) != total {
		b.Fatalf("measured %d of %d events", len(lat), total)
	}
	ms := func(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }
	b.ReportMetric(ms(lat[len(lat)/2]), "p50-ms")
	b.ReportMetric(ms(lat[len(lat)*99/100]), "p99-ms")
	b.ReportMetric(ms(lat[len(lat)-1]), "max-ms")
}

// startRelayStop runs r until the returned stop function is called.
func startRelayStop[TTx any](t testing.TB, r *outbox.Relay[TTx]) (stop func() error) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- r.Run(ctx) }()
	var once sync.Once
	var err error
	stop = func() error {
		once.Do(func() { cancel(); err = <-done })
		return err
	}
	t.Cleanup(func() { _ = stop() })
	return stop
}
