package consumer_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/consumer"
	"github.com/idemkit/idem/dlq"
	"github.com/idemkit/idem/inbox"
	"github.com/idemkit/idem/internal/testdb"
	"github.com/idemkit/idem/store"
)

// A batch consumer whose Handler writes through inbox.Exec: the writes are
// queued in the batch's fast pass and sent with its savepoint's release.
// A message whose write fails at the database (a NOT NULL violation when
// the queue is sent) sends the batch to the per-message replay: it alone is
// dead-lettered and every other message's effect commits exactly once.
func TestBatchExecQueued(t *testing.T) {
	t.Parallel()
	testdb.EachDriver(t, func(t *testing.T, d testdb.Driver) { testBatchExecQueued(t, d.D) })
}

func testBatchExecQueued[TTx any](t *testing.T, d store.Driver[TTx]) {
	ctx := context.Background()
	bizTable(t, d)
	sub, publish := ordersFeed(t)
	ids := []string{"poison"}
	for i := range 15 {
		ids = append(ids, fmt.Sprintf("m-%d", i))
	}
	for _, id := range ids {
		publish(id)
	}
	letters, _ := dlq.New(d, dlq.Config{})
	c, err := consumer.New(newInbox(t, d), sub, consumer.Config[TTx]{
		Name: "billing", BatchSize: 8, FetchWait: 50 * time.Millisecond, DLQ: letters,
		MaxAttempts: 1, Backoff: consumer.Backoff{Base: time.Millisecond, Max: 5 * time.Millisecond},
		Handler: func(ctx context.Context, tx TTx, msg idem.Message) error {
			var payload any = string(msg.Payload)
			if msg.ID == "poison" {
				payload = nil // payload is NOT NULL: fails when sent
			}
			return inbox.Exec(ctx, d, tx, `INSERT INTO biz_effects (message_id, attempt, payload) VALUES ($1, $2, $3)`, msg.ID, msg.Attempt, payload)
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	start(t, c)
	waitFor(t, "15 effects and the poison message dead-lettered", func() bool {
		n, _ := letters.CountParked(ctx)
		return effects(t, d, "") == 15 && n["billing"] == 1
	})
	for _, id := range ids[1:] {
		if n := effects(t, d, id); n != 1 {
			t.Fatalf("%s applied %d times", id, n)
		}
	}
	if n := effects(t, d, "poison"); n != 0 {
		t.Fatalf("poison applied %d times", n)
	}
}
