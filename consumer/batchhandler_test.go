package consumer_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/broker/memory"
	"github.com/idemkit/idem/consumer"
	"github.com/idemkit/idem/dlq"
	"github.com/idemkit/idem/internal/testdb"
	"github.com/idemkit/idem/store"
)

// ordersFeed subscribes the consumer group "billing" to "orders" on a new
// memory broker, and returns the subscription and a function publishing
// the message id with the payload {"id": id} on "orders".
func ordersFeed(t *testing.T) (*memory.Subscriber, func(id string)) {
	b := memBroker(t)
	sub, err := b.Subscribe("orders", "billing")
	if err != nil {
		t.Fatal(err)
	}
	pub := b.Publisher()
	return sub, func(id string) {
		t.Helper()
		if err := pub.Publish(context.Background(), idem.Message{ID: id, Subject: "orders", Payload: []byte(`{"id":"` + id + `"}`)}); err != nil {
			t.Fatal(err)
		}
	}
}

// Config.BatchHandler: a fetched batch's new messages are applied in one
// call (duplicates left out), each effect once; a batch whose BatchHandler
// fails is applied message by message through Handler, so the one bad
// message is dead-lettered and the others commit.
func TestBatchHandler(t *testing.T) {
	t.Parallel()
	testdb.EachDriver(t, func(t *testing.T, d testdb.Driver) { testBatchHandler(t, d.D) })
}

func testBatchHandler[TTx any](t *testing.T, d store.Driver[TTx]) {
	ctx := context.Background()
	bizTable(t, d)
	sub, publish := ordersFeed(t)
	for i := range 20 {
		publish(fmt.Sprintf("m-%d", i))
	}
	publish("m-3") // a redelivery of an applied message: never applied again

	var mu sync.Mutex
	inBatches, single, batchCalls := 0, 0, 0
	letters, _ := dlq.New(d, dlq.Config{})
	c, err := consumer.New(newInbox(t, d), sub, consumer.Config[TTx]{
		Name: "billing", BatchSize: 8, FetchWait: 50 * time.Millisecond, DLQ: letters,
		MaxAttempts: 1, Backoff: consumer.Backoff{Base: time.Millisecond, Max: 5 * time.Millisecond},
		Handler: func(ctx context.Context, tx TTx, msg idem.Message) error {
			mu.Lock()
			single++
			mu.Unlock()
			if msg.ID == "poison" {
				return idem.Permanent(errors.New("rejected"))
			}
			return record(ctx, d, tx, msg.ID, msg.Attempt, msg.Payload)
		},
		BatchHandler: func(ctx context.Context, tx TTx, msgs []idem.Message) error {
			mu.Lock()
			batchCalls++
			mu.Unlock()
			for _, m := range msgs {
				if m.ID == "poison" {
					return errors.New("batch holds a message the handler rejects")
				}
				if err := record(ctx, d, tx, m.ID, m.Attempt, m.Payload); err != nil {
					return err
				}
			}
			mu.Lock()
			inBatches += len(msgs)
			mu.Unlock()
			return nil
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	stop := start(t, c)
	waitFor(t, "20 effects", func() bool { return effects(t, d, "") == 20 })
	for i := range 20 {
		if n := effects(t, d, fmt.Sprintf("m-%d", i)); n != 1 {
			t.Fatalf("m-%d applied %d times", i, n)
		}
	}
	mu.Lock()
	if batchCalls == 0 || inBatches+single != 20 {
		t.Fatalf("batch calls %d applying %d messages, %d through Handler: want every new message applied once", batchCalls, inBatches, single)
	}
	mu.Unlock()

	// A batch with a poison message: the batch call fails and is rolled
	// back, Handler applies the others and rejects the poison one.
	stop()
	for _, id := range []string{"n-1", "poison", "n-2", "n-3"} {
		publish(id)
	}
	start(t, c)
	waitFor(t, "23 effects and the poison message dead-lettered", func() bool {
		n, _ := letters.CountParked(ctx)
		return effects(t, d, "") == 23 && n["billing"] == 1
	})
	if n := effects(t, d, "poison"); n != 0 {
		t.Fatalf("poison applied %d times", n)
	}
}
