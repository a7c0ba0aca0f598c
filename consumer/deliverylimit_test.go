package consumer_test

import (
	"context"
	"database/sql"
	"errors"
	"testing"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/broker"
	"github.com/idemkit/idem/consumer"
	"github.com/idemkit/idem/internal/testdb"
)

// limitedSub is a subscriber whose broker gives a message up after max
// deliveries.
type limitedSub struct {
	broker.Subscriber
	max int
}

func (s limitedSub) MaxDeliveries() int { return s.max }

// A broker that stops redelivering a message before the consumer's
// MaxAttempts would drop a message that keeps failing, neither processed
// nor dead-lettered: New refuses it with idem.ErrInvalidOption, and takes
// a limit at or above MaxAttempts, or none.
func TestNewRefusesADeliveryLimitBelowMaxAttempts(t *testing.T) {
	d := testdb.SQLite(t)
	sub, err := memBroker(t).Subscribe("orders", "billing")
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		limit, maxAttempts int
		ok                 bool
	}{
		{3, 0, false}, // MaxAttempts defaults to 5
		{4, 5, false},
		{5, 5, true},
		{10, 0, true},
		{-1, 5, true}, // unlimited
		{0, 5, true},
	} {
		_, err := consumer.New(newInbox(t, d), limitedSub{sub, c.limit}, consumer.Config[*sql.Tx]{
			Name: "billing", MaxAttempts: c.maxAttempts,
			Handler: func(context.Context, *sql.Tx, idem.Message) error { return nil },
		})
		if (err == nil) != c.ok || (err != nil && !errors.Is(err, idem.ErrInvalidOption)) {
			t.Errorf("delivery limit %d, MaxAttempts %d: %v; want ok=%v (else idem.ErrInvalidOption)", c.limit, c.maxAttempts, err, c.ok)
		}
	}
}
