package outbox

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/internal/testdb"
	"github.com/idemkit/idem/store"
)

// An ordering key of MaxOrderingKeyLen bytes is stored whole on every
// dialect (MySQL's columns are VARBINARY(1024)); a longer one is
// ErrInvalidInput before the store, not a store error. A relay's lease
// name longer than its column is refused as an option.
func TestOrderingKeyLengthLimit(t *testing.T) {
	testdb.EachDriver(t, func(t *testing.T, e testdb.Driver) {
		ctx := context.Background()
		d := e.D
		o, err := New(d, Config{})
		if err != nil {
			t.Fatal(err)
		}
		key := strings.Repeat("k", MaxOrderingKeyLen)
		enqueueTx(t, d, o, Event{ID: "e1", Type: "t", Topic: "x", Key: key, Payload: []byte(`{}`)})
		var n int
		if err := d.Pool().QueryRow(ctx, `SELECT count(*) FROM `+d.Table("outbox")+` WHERE ordering_key = $1`, key).Scan(&n); err != nil || n != 1 {
			t.Fatalf("%d events with the %d-byte key (%v), want 1", n, len(key), err)
		}
		err = store.InTx(ctx, d, func(tx any) error {
			_, err := o.EnqueueTx(ctx, tx, Event{ID: "e2", Type: "t", Topic: "x", Key: key + "k", Payload: []byte(`{}`)})
			return err
		})
		if !errors.Is(err, idem.ErrInvalidInput) {
			t.Fatalf("ordering key of %d bytes: err = %v, want ErrInvalidInput", len(key)+1, err)
		}
		if _, err := NewRelay(d, &fakePub{}, RelayConfig{LeaseName: strings.Repeat("l", idem.MaxKeyLen)}); err != nil {
			t.Fatalf("lease name of %d bytes: %v", idem.MaxKeyLen, err)
		}
		_, err = NewRelay(d, &fakePub{}, RelayConfig{LeaseName: strings.Repeat("l", idem.MaxKeyLen+1)})
		if !errors.Is(err, idem.ErrInvalidOption) {
			t.Fatalf("lease name of %d bytes: err = %v, want ErrInvalidOption", idem.MaxKeyLen+1, err)
		}
	})
}
