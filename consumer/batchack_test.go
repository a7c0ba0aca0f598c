package consumer_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/broker"
	"github.com/idemkit/idem/broker/memory"
	"github.com/idemkit/idem/consumer"
	"github.com/idemkit/idem/dlq"
	"github.com/idemkit/idem/internal/testdb"
	"github.com/idemkit/idem/store"
)

// batchAcker is a subscriber that acks batches (broker.BatchAcker) by
// acking each delivery, recording every batch it was given.
type batchAcker struct {
	broker.Subscriber
	mu      sync.Mutex
	batches [][]string
}

func (s *batchAcker) AckBatch(ctx context.Context, ds []broker.Delivery) error {
	ids := make([]string, len(ds))
	var errs []error
	for i, d := range ds {
		ids[i] = d.Message().ID
		errs = append(errs, d.Ack(ctx))
	}
	s.mu.Lock()
	s.batches = append(s.batches, ids)
	s.mu.Unlock()
	return errors.Join(errs...)
}

func (s *batchAcker) acked() map[string]int {
	s.mu.Lock()
	defer s.mu.Unlock()
	n := map[string]int{}
	for _, b := range s.batches {
		for _, id := range b {
			n[id]++
		}
	}
	return n
}

func TestBatchAckedInOneCall(t *testing.T) {
	t.Parallel()
	testdb.EachDriver(t, func(t *testing.T, d testdb.Driver) { testBatchAckedInOneCall(t, d.D) })
}

// A batch's committed deliveries are acked with one AckBatch call of a
// subscriber that offers it; a poison message is dead-lettered instead,
// and a delivery whose AfterCommit hook fails is not acked at all.
func testBatchAckedInOneCall[TTx any](t *testing.T, d store.Driver[TTx]) {
	ctx := context.Background()
	bizTable(t, d)
	// An ack wait longer than the test: m-05 (not acked) is not delivered
	// again meanwhile, into a second AckBatch.
	b, err := memory.New(memory.Config{AckWait: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { b.Close() })
	raw, err := b.Subscribe("orders", "billing")
	if err != nil {
		t.Fatal(err)
	}
	sub := &batchAcker{Subscriber: raw}
	letters, _ := dlq.New(d, dlq.Config{})
	const n = 12
	// Published before the consumer starts, so its first fetch takes them all.
	for i := range n {
		if err := b.Publisher().Publish(ctx, idem.Message{ID: fmt.Sprintf("m-%02d", i), Subject: "orders", Payload: []byte(`{}`)}); err != nil {
			t.Fatal(err)
		}
	}
	c, err := consumer.New(newInbox(t, d), sub, consumer.Config[TTx]{
		Name: "billing", BatchSize: 32, FetchWait: 50 * time.Millisecond, DLQ: letters,
		Handler: func(ctx context.Context, tx TTx, msg idem.Message) error {
			if msg.ID == "m-03" {
				return idem.Permanent(errors.New("bad order"))
			}
			return record(ctx, d, tx, msg.ID, msg.Attempt, msg.Payload)
		},
		Hooks: consumer.Hooks{AfterCommit: func(msg idem.Message) error {
			if msg.ID == "m-05" {
				return errors.New("crash before the ack")
			}
			return nil
		}},
	})
	if err != nil {
		t.Fatal(err)
	}
	stop := start(t, c)
	waitFor(t, "10 deliveries acked and one dead letter", func() bool {
		parked, _ := letters.CountParked(ctx)
		return len(sub.acked()) == n-2 && parked["billing"] == 1
	})
	stop()
	acked := sub.acked()
	for i := range n {
		id := fmt.Sprintf("m-%02d", i)
		want := 1
		if id == "m-03" || id == "m-05" {
			want = 0
		}
		if acked[id] != want {
			t.Errorf("%s acked %d times through AckBatch, want %d (%v)", id, acked[id], want, sub.batches)
		}
	}
	if len(sub.batches) != 1 {
		t.Errorf("AckBatch called %d times for one fetched batch, want 1: %v", len(sub.batches), sub.batches)
	}
	if got := effects(t, d, ""); got != n-1 {
		t.Errorf("effects = %d, want %d (all but the poison message)", got, n-1)
	}
}
