package dlq_test

import (
	"context"
	"errors"
	"testing"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/broker"
	"github.com/idemkit/idem/dlq"
	"github.com/idemkit/idem/inbox"
	"github.com/idemkit/idem/internal/testdb"
	"github.com/idemkit/idem/store"
)

// TestRedriveAndReviseForTheLettersConsumer: a redrive and a revision name
// the letter's consumer (broker.HeaderRedriveFor); a revision records the
// original message id as consumed in that consumer's inbox in the
// transaction that resolves the letter (a failed publish records
// nothing), so the original sent again is a duplicate there; an existing
// record (a letter parked for a fingerprint mismatch) refuses the
// revision unless forced, and is left as it is;
// OfMessage lists the letters of one message id across consumers.
func TestRedriveAndReviseForTheLettersConsumer(t *testing.T) {
	t.Parallel()
	testdb.EachDriver(t, func(t *testing.T, e testdb.Driver) { testRedriveFor(t, e.D) })
}

func testRedriveFor[TTx any](t *testing.T, d store.Driver[TTx]) {
	ctx := context.Background()
	s, ib := storeAndInbox(t, d, dlq.Config{}, inbox.Config{})
	ran := 0
	process := func(consumer, id, payload string) (inbox.Result, error) {
		return ib.Process(ctx, consumer, idem.Message{ID: id, Subject: "orders", Payload: []byte(payload)},
			func(context.Context, TTx, idem.Message) error { ran++; return nil })
	}
	park := func(consumer, id, payload string) int64 {
		t.Helper()
		l, err := s.Park(ctx, dlq.FromMessage(consumer, idem.Message{ID: id, Subject: "orders", Payload: []byte(payload),
			Headers: map[string]string{"ce-id": id}}, idem.Permanent(errors.New("bad"))))
		if err != nil {
			t.Fatal(err)
		}
		return l
	}
	pub := &recPublisher{}

	// A plain redrive names its consumer.
	billing := park("billing", "m-1", `{"n":1}`)
	park("search", "m-1", `{"n":1}`)
	park("notification", "m-1", `{"n":1}`)
	if _, err := s.Redrive(ctx, billing, "op", pub); err != nil {
		t.Fatal(err)
	}
	if got := pub.msgs[0].Headers[broker.HeaderRedriveFor]; got != "billing" {
		t.Fatalf("redrive %s = %q, want billing", broker.HeaderRedriveFor, got)
	}
	ls, err := s.OfMessage(ctx, "m-1")
	if err != nil || len(ls) != 3 || ls[0].Consumer != "billing" || ls[1].Consumer != "search" || ls[2].Consumer != "notification" {
		t.Fatalf("OfMessage(m-1) = %+v, %v; want the 3 letters, oldest first", ls, err)
	}

	// A revision whose publish fails may be out (the broker may have
	// taken it): the letter keeps it, and the original stays recorded as
	// consumed by search.
	search := park("search", "m-2", `{"n":2}`)
	pub.fail = errors.New("broker down")
	if _, _, err := s.Revise(ctx, search, "op", []byte(`{"n":3}`), pub); err == nil {
		t.Fatal("revise with a failing publisher succeeded")
	}
	pub.fail = nil
	if n := testdb.Count(t, d, `SELECT count(*) FROM `+d.Table("inbox")+` WHERE consumer = 'search' AND message_id = 'm-2'`); n != 1 {
		t.Fatalf("a revise whose publish failed left %d inbox row(s) of its original, want 1", n)
	}
	if l, _ := s.Get(ctx, search); l.State != dlq.Parked || l.RevisionID == "" {
		t.Fatalf("letter after a failed publish: %s, revision %q; want parked with its revision", l.State, l.RevisionID)
	}
	_, rev, err := s.Revise(ctx, search, "op", []byte(`{"n":3}`), pub)
	if err != nil {
		t.Fatal(err)
	}
	if rev.Headers[broker.HeaderRedriveFor] != "search" || rev.Headers[dlq.HeaderRevisionOf] != "m-2" {
		t.Fatalf("revision headers %v", rev.Headers)
	}
	// The original sent again is a duplicate for search, not for others.
	if res, err := process("search", "m-2", `{"n":2}`); err != nil || res != inbox.Duplicate {
		t.Fatalf("original re-sent to search: %v %v, want a duplicate", res, err)
	}
	if _, err := process("search", "m-2", `{"n":9}`); !errors.Is(err, idem.ErrFingerprintMismatch) {
		t.Fatalf("m-2 with another payload: %v, want a fingerprint mismatch", err)
	}
	if res, err := process("billing", "m-2", `{"n":2}`); err != nil || res != inbox.Processed || ran != 1 {
		t.Fatalf("original to billing: %v %v (ran %d), want processed", res, err, ran)
	}

	// A letter parked for a fingerprint mismatch: the id was processed
	// with the first payload, so a revision is refused unless forced; a
	// forced one leaves the record of the first payload as it is.
	if _, err := process("notification", "m-3", `{"n":"first"}`); err != nil {
		t.Fatal(err)
	}
	mismatch := park("notification", "m-3", `{"n":"second"}`)
	var re *dlq.RefusedError
	if _, _, err := s.Revise(ctx, mismatch, "op", []byte(`{"n":"third"}`), pub); !errors.As(err, &re) ||
		re.Reason != dlq.RefusedOriginalProcessed {
		t.Fatalf("revise of a mismatch letter: %v, want refusal %s", err, dlq.RefusedOriginalProcessed)
	}
	if _, _, err := s.ReviseWith(ctx, mismatch, "op", []byte(`{"n":"third"}`), pub,
		dlq.ReviseOptions{Force: true, Reason: "the second payload is a correction, meant to apply"}); err != nil {
		t.Fatal(err)
	}
	if res, err := process("notification", "m-3", `{"n":"first"}`); err != nil || res != inbox.Duplicate {
		t.Fatalf("m-3 first payload: %v %v, want a duplicate", res, err)
	}
}
