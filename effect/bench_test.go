package effect_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/idemkit/idem/effect"
	"github.com/idemkit/idem/internal/testdb"
	"github.com/idemkit/idem/store"
)

func benchStores(b *testing.B, f func(b *testing.B, d store.Driver[any])) {
	b.Run("sqlite", func(b *testing.B) { f(b, erase(testdb.SQLite(b))) })
	b.Run("pgx", func(b *testing.B) { f(b, erase(testdb.Pgx(b))) })
}

// BenchmarkWorkerDrain: b.N scheduled effects drained by one worker
// (Concurrency 16) with a no-op performer; claim + finalise cost per effect.
func BenchmarkWorkerDrain(b *testing.B) {
	benchStores(b, func(b *testing.B, d store.Driver[any]) {
		ctx := context.Background()
		l, _ := effect.New(d, effect.Config{})
		for start := 0; start < b.N; start += 500 {
			_ = store.InTx(ctx, d, func(tx any) error {
				for i := start; i < min(start+500, b.N); i++ {
					if _, _, err := l.ScheduleTx(ctx, tx, effect.Effect{Key: fmt.Sprintf("k%d", i), Kind: "noop", Payload: []byte(`{}`)}); err != nil {
						return err
					}
				}
				return nil
			})
		}
		w, _ := effect.NewWorker(l, effect.WorkerConfig[any]{Concurrency: 16, PollInterval: time.Millisecond})
		_ = w.Register("noop", func(context.Context, string, []byte) ([]byte, error) { return []byte("ok"), nil })
		b.ResetTimer()
		runCtx, stop := context.WithCancel(ctx)
		done := make(chan struct{})
		go func() { defer close(done); _ = w.Run(runCtx) }()
		for {
			c, err := l.Counts(ctx)
			if err != nil {
				b.Fatal(err)
			}
			if c[effect.Completed] == int64(b.N) {
				break
			}
			time.Sleep(time.Millisecond)
		}
		b.StopTimer()
		stop()
		<-done
		b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "effects/s")
	})
}

// BenchmarkDo: a guarded inline call on a fresh key (insert in_progress,
// call, fenced complete), and on a completed key (stored result returned).
func BenchmarkDo(b *testing.B) {
	benchStores(b, func(b *testing.B, d store.Driver[any]) {
		ctx := context.Background()
		l, _ := effect.New(d, effect.Config{})
		fn := func(context.Context, string) ([]byte, error) { return []byte("ok"), nil }
		b.Run("fresh", func(b *testing.B) {
			for i := 0; b.Loop(); i++ {
				if _, err := l.Do(ctx, fmt.Sprintf("fresh-%d", i), fn); err != nil {
					b.Fatal(err)
				}
			}
		})
		b.Run("completed", func(b *testing.B) {
			_, _ = l.Do(ctx, "done", fn)
			for b.Loop() {
				if _, err := l.Do(ctx, "done", fn); err != nil {
					b.Fatal(err)
				}
			}
		})
	})
}
