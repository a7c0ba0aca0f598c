package dlq_test

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/dlq"
	"github.com/idemkit/idem/internal/testdb"
)

// A letter's consumer is a consumer name: up to idem.MaxKeyLen bytes,
// stored whole on every dialect (MySQL's column is VARBINARY(255)); a
// longer one is ErrInvalidInput before the store, not a store error.
func TestParkConsumerLengthLimit(t *testing.T) {
	testdb.EachDriver(t, func(t *testing.T, e testdb.Driver) {
		ctx := context.Background()
		s, err := dlq.New(e.D, dlq.Config{})
		if err != nil {
			t.Fatal(err)
		}
		consumer := strings.Repeat("c", idem.MaxKeyLen)
		id, err := s.Park(ctx, dlq.Letter{Consumer: consumer, MessageID: "m1", Payload: []byte(`{}`), Error: "boom"})
		if err != nil {
			t.Fatal(err)
		}
		l, err := s.Get(ctx, id)
		if err != nil || l.Consumer != consumer {
			t.Fatalf("stored consumer of %d bytes (%v), want %d", len(l.Consumer), err, len(consumer))
		}
		_, err = s.Park(ctx, dlq.Letter{Consumer: consumer + "c", MessageID: "m1", Payload: []byte(`{}`), Error: "boom"})
		if !errors.Is(err, idem.ErrInvalidInput) {
			t.Fatalf("consumer of %d bytes: err = %v, want ErrInvalidInput", len(consumer)+1, err)
		}
	})
}
