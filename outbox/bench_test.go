package outbox

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/broker"
	"github.com/idemkit/idem/internal/lease"
	"github.com/idemkit/idem/internal/testdb"
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
	o, _ := New(d, Config{})
	evs := make([]Event, 0, 100)
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
	cfg.OnPublished = func(_ context.Context, evs []Event) {
		if published += len(evs); published == b.N {
			close(done)
		}
	}
	r, _ := NewRelay(d, pub, cfg)
	b.ResetTimer()
	start := time.Now()
	stop := startRelay(b, r)
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
	o, _ := New(d, Config{})
	cfg := fastRelay("latency")
	cfg.PollInterval = time.Second
	cfg.ClaimTTL = 30 * time.Second
	r, _ := NewRelay(d, pub, cfg)
	stop := startRelay(b, r)
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

// BenchmarkEnqueue measures producer transactions/s on PostgreSQL with 8
// concurrent producers, each transaction = one business row + one event
// (idem: Enqueue), against the same business row + one plain INSERT of the
// event into a bare table (what a plain SQL publisher costs). The two run
// interleaved in rounds of b.N transactions (5 rounds each) on a noisy
// machine; it reports the medians and their ratio (idem/plain).
func BenchmarkEnqueue(b *testing.B) {
	d := testdb.Pgx(b)
	ctx := context.Background()
	biz := d.Table("bench_biz")
	plain := d.Table("bench_plain")
	for _, s := range []string{
		`CREATE TABLE ` + biz + ` (id bigserial PRIMARY KEY, v text NOT NULL)`,
		`CREATE TABLE ` + plain + ` (seq bigserial PRIMARY KEY, uuid text NOT NULL UNIQUE, payload bytea NOT NULL, metadata text NOT NULL, created_at timestamptz NOT NULL DEFAULT now())`,
	} {
		if _, err := d.Pool().Exec(ctx, s); err != nil {
			b.Fatal(err)
		}
	}
	o, _ := New(d, Config{})
	interleaved(b, func(idemMode bool, i int) error {
		return store.InTx(ctx, d, func(tx pgx.Tx) error {
			if _, err := tx.Exec(ctx, `INSERT INTO `+biz+` (v) VALUES ($1)`, "order"); err != nil {
				return err
			}
			e := ev(fmt.Sprintf("k%d", i%1000), i)
			if !idemMode {
				_, err := tx.Exec(ctx, `INSERT INTO `+plain+` (uuid, payload, metadata) VALUES ($1, $2, $3)`,
					fmt.Sprint("id-", i), e.Payload, `{}`)
				return err
			}
			_, err := o.EnqueueTx(ctx, tx, e)
			return err
		})
	})
}

// interleaved runs 5 rounds of b.N producer transactions on each side (8
// concurrent producers, idem and plain alternating; tx gets a number unique
// across rounds) and reports the medians of the rates and their ratio.
func interleaved(b *testing.B, tx func(idemMode bool, i int) error) {
	var ids atomic.Int64
	round := func(idemMode bool) float64 {
		var next atomic.Int64
		start := time.Now()
		var wg sync.WaitGroup
		for range 8 {
			wg.Go(func() {
				for next.Add(1) <= int64(b.N) {
					if err := tx(idemMode, int(ids.Add(1))); err != nil {
						b.Error(err)
						return
					}
				}
			})
		}
		wg.Wait()
		return float64(b.N) / time.Since(start).Seconds()
	}
	var a, p []float64
	for range 5 {
		a = append(a, round(true))
		p = append(p, round(false))
	}
	slices.Sort(a)
	slices.Sort(p)
	b.ReportMetric(a[2], "idem-tx/s")
	b.ReportMetric(p[2], "plain-tx/s")
	b.ReportMetric(a[2]/p[2], "ratio")
}
