package outbox

import (
	"context"
	"errors"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/internal/errtext/errtexttest"
	"github.com/idemkit/idem/internal/lease"
	"github.com/idemkit/idem/internal/testdb"
	"github.com/idemkit/idem/store"
)

// A publish error whose text has a rune across byte 2,000 and a NUL byte is
// recorded with the parked event. The relay used to cut it at byte 2,000,
// splitting the rune: PostgreSQL refused the write, so the event was never
// parked and was published again after every claim expiry.
func TestPublishErrorTextIsStorable(t *testing.T) {
	t.Parallel()
	testdb.EachDriver(t, func(t *testing.T, e testdb.Driver) { testPublishErrorTextIsStorable(t, e.D) })
}

func testPublishErrorTextIsStorable[TTx any](t *testing.T, d store.Driver[TTx]) {
	ctx := context.Background()
	o, _ := New(d, Config{})
	out := enqueueTx(t, d, o, ev("bad", 0))
	cause := idem.Permanent(errors.New(errtexttest.Text("permanent: ")))
	if utf8.ValidString(cause.Error()[:errtexttest.Cut]) {
		t.Fatal("the error text must have a rune across the old cut")
	}
	pub := &fakePub{}
	pub.setFail(out[0].ID, cause)
	r, _ := NewRelay(d, pub, fastRelay("r1"))
	startRelay(t, r)
	deadline := time.Now().Add(15 * time.Second)
	for countState(t, d, lease.Failed) != 1 {
		if time.Now().After(deadline) {
			t.Fatal("the event was not parked: its failure could not be recorded")
		}
		time.Sleep(10 * time.Millisecond)
	}
	parked, err := o.ListParked(ctx, 0)
	if err != nil || len(parked) != 1 {
		t.Fatalf("ListParked = %v, %v", parked, err)
	}
	errtexttest.Check(t, "parked event's error", parked[0].LastError, cause.Error())
}
