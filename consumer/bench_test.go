package consumer_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/broker/memory"
	"github.com/idemkit/idem/consumer"
	"github.com/idemkit/idem/internal/testdb"
	"github.com/idemkit/idem/store"
)

// BenchmarkConsume measures end-to-end consumption (fetch, inbox insert,
// handler insert, commit, ack) from the in-memory broker, per message.
func BenchmarkConsume(b *testing.B) {
	for _, batch := range []int{1, 32} {
		b.Run(fmt.Sprintf("sqlite/batch%d", batch), func(b *testing.B) { benchConsume(b, testdb.SQLite(b), batch) })
		b.Run(fmt.Sprintf("pgx/batch%d", batch), func(b *testing.B) { benchConsume(b, testdb.Pgx(b), batch) })
	}
}

func benchConsume[TTx any](b *testing.B, d store.Driver[TTx], batch int) {
	ctx := context.Background()
	testdb.Exec(b, d, `CREATE TABLE biz_effects (message_id text NOT NULL, attempt integer NOT NULL, payload text NOT NULL)`)
	br, _ := memory.New(memory.Config{})
	defer br.Close()
	sub, _ := br.Subscribe("s", "g")
	ib, _ := newInboxB(b, d)
	c, err := consumer.New(ib, sub, consumer.Config[TTx]{Name: "bench", BatchSize: batch, Concurrency: 2, FetchWait: 20 * time.Millisecond,
		Handler: func(ctx context.Context, tx TTx, msg idem.Message) error {
			return record(ctx, d, tx, msg.ID, msg.Attempt, msg.Payload)
		}})
	if err != nil {
		b.Fatal(err)
	}
	msgs := make([]idem.Message, b.N)
	for i := range msgs {
		msgs[i] = idem.Message{ID: fmt.Sprintf("m-%d", i), Subject: "s", Payload: []byte(`{"a":1}`)}
	}
	b.ResetTimer()
	if err := br.Publisher().Publish(ctx, msgs...); err != nil {
		b.Fatal(err)
	}
	runCtx, stop := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() { _ = c.Run(runCtx); close(done) }()
	for br.Stats().Acked < b.N {
		time.Sleep(time.Millisecond)
	}
	b.StopTimer()
	stop()
	<-done
}
