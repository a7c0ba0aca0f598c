package dlq_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/dlq"
	"github.com/idemkit/idem/inbox"
	"github.com/idemkit/idem/internal/testclock"
	"github.com/idemkit/idem/internal/testdb"
	"github.com/idemkit/idem/retention"
	"github.com/idemkit/idem/store"
)

func TestRedriveHorizon(t *testing.T) {
	t.Parallel()
	testdb.EachDriver(t, func(t *testing.T, e testdb.Driver) { testRedriveHorizon(t, e.D) })
}

func testRedriveHorizon[TTx any](t *testing.T, d store.Driver[TTx]) {
	ctx := context.Background()
	clock := testclock.New(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	const retain = 24 * time.Hour
	ib, err := inbox.New(d, inbox.Config{Retention: retain, Now: clock.Now})
	if err != nil {
		t.Fatal(err)
	}
	s, err := dlq.New(d, dlq.Config{Now: clock.Now, InboxRetention: func(string) time.Duration { return retain }})
	if err != nil {
		t.Fatal(err)
	}
	pub := &recPublisher{}
	park := func(msg idem.Message, cause error) int64 {
		t.Helper()
		id, err := s.Park(ctx, dlq.FromMessage("billing", msg, cause))
		if err != nil {
			t.Fatal(err)
		}
		return id
	}
	refused := func(id int64, reason string) {
		t.Helper()
		before := pub.count()
		_, err := s.Redrive(ctx, id, "alice", pub)
		var re *dlq.RefusedError
		if !errors.Is(err, dlq.ErrRedriveRefused) || !errors.As(err, &re) || re.Reason != reason {
			t.Fatalf("redrive of letter %d: err = %v, want refusal %s", id, err, reason)
		}
		if pub.count() != before {
			t.Fatal("a refused redrive published")
		}
		if l, _ := s.Get(ctx, id); l.State != dlq.Parked {
			t.Fatalf("refused letter is %s, want parked", l.State)
		}
	}

	// A letter younger than the inbox retention is redriven as before.
	young := park(idem.Message{ID: "young", Subject: "orders", Payload: []byte(`{}`)}, idem.Permanent(errors.New("bad")))
	if _, err := s.Redrive(ctx, young, "alice", pub); err != nil || pub.count() != 1 {
		t.Fatalf("young letter: %v (published %d)", err, pub.count())
	}

	// A letter older than the retention: refused; force needs a reason; a
	// forced redrive publishes and records the reason.
	old := park(idem.Message{ID: "old", Subject: "orders", Payload: []byte(`{}`)}, idem.Permanent(errors.New("bad")))
	clock.Advance(retain + time.Hour)
	refused(old, dlq.RefusedTooOld)
	if _, err := s.RedriveWith(ctx, old, "alice", pub, dlq.RedriveOptions{Force: true}); !errors.Is(err, idem.ErrInvalidOption) {
		t.Fatalf("force without reason: %v", err)
	}
	l, err := s.RedriveWith(ctx, old, "alice", pub, dlq.RedriveOptions{Force: true, Reason: "checked the ledger: never applied"})
	if err != nil || pub.count() != 2 {
		t.Fatalf("forced redrive: %v (published %d)", err, pub.count())
	}
	if l, _ = s.Get(ctx, l.ID); l.State != dlq.Redriven || l.RedriveReason != "checked the ledger: never applied" {
		t.Fatalf("forced letter %+v", l)
	}

	// A letter whose id the inbox still remembers is redriven: the inbox
	// absorbs it if it was processed.
	known := idem.Message{ID: "known", Subject: "orders", Payload: []byte(`{"v":1}`)}
	if _, err := ib.Process(ctx, "billing", known, func(context.Context, TTx, idem.Message) error { return nil }); err != nil {
		t.Fatal(err)
	}
	knownLetter := park(known, idem.Permanent(errors.New("bad")))
	clock.Advance(retain - time.Minute)
	if _, err := s.Redrive(ctx, knownLetter, "alice", pub); err != nil {
		t.Fatalf("letter with a live inbox record: %v", err)
	}

	// A fingerprint mismatch: the id was processed with payload 1; the
	// delivery with payload 2 was parked. While the original record lives,
	// a redrive is safe (parked again as a mismatch); once it expires, and
	// after the GC collected it, the redrive is refused.
	orig := idem.Message{ID: "order-7", Subject: "orders", Payload: []byte(`{"amount":100}`)}
	if _, err := ib.Process(ctx, "billing", orig, func(context.Context, TTx, idem.Message) error { return nil }); err != nil {
		t.Fatal(err)
	}
	second := orig
	second.Payload = []byte(`{"amount":999}`)
	_, perr := ib.Process(ctx, "billing", second, func(context.Context, TTx, idem.Message) error { return nil })
	if !errors.Is(perr, idem.ErrFingerprintMismatch) {
		t.Fatalf("second payload: %v, want a fingerprint mismatch", perr)
	}
	mm := park(second, perr)
	clock.Advance(retain + time.Minute)
	refused(mm, dlq.RefusedOriginalExpired) // expired, not yet collected
	gc, err := retention.New(d, retention.Config{Now: clock.Now})
	if err != nil {
		t.Fatal(err)
	}
	if rep, err := gc.RunOnce(ctx); err != nil || rep.Deleted["inbox"] == 0 {
		t.Fatalf("gc: %+v, %v", rep, err)
	}
	refused(mm, dlq.RefusedOriginalExpired) // collected

	// RedriveAll skips refused letters, redrives the others and reports
	// the refusals.
	fresh := park(idem.Message{ID: "fresh", Subject: "orders", Payload: []byte(`{}`)}, idem.Permanent(errors.New("bad")))
	n, err := s.RedriveAll(ctx, dlq.Filter{Consumer: "billing"}, "alice", pub, nil)
	if n != 1 || !errors.Is(err, dlq.ErrRedriveRefused) {
		t.Fatalf("RedriveAll = %d, %v", n, err)
	}
	if l, _ := s.Get(ctx, fresh); l.State != dlq.Redriven {
		t.Fatalf("fresh letter %s", l.State)
	}
}
