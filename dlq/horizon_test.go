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
	s, ib := storeAndInbox(t, d, dlq.Config{Now: clock.Now, InboxRetention: func(string) time.Duration { return retain }},
		inbox.Config{Retention: retain, Now: clock.Now})
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

// A consumer that raises its inbox retention does not widen the redrive
// horizon of the letters whose messages it may have recorded under the
// shorter one. The reviewer's scenario: retention 1 day; message M dead-
// lettered, then processed by a redelivery (its record expires after a
// day) and collected; the consumer restarts with 30 days; five days later
// a redrive of M's letter must be refused, or M would be applied again.
// Letters that first failed once the shorter retention has run its
// course since the widening are judged by the longer one; a narrowing
// applies at once.
func TestRedriveHorizonAfterARetentionWidening(t *testing.T) {
	t.Parallel()
	testdb.EachDriver(t, func(t *testing.T, e testdb.Driver) { testRetentionWidening(t, e.D) })
}

func testRetentionWidening[TTx any](t *testing.T, d store.Driver[TTx]) {
	ctx := context.Background()
	clock := testclock.New(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	const day = 24 * time.Hour
	var ib *inbox.Inbox[TTx]
	record := func(r time.Duration) { // the consumer (re)starts with retention r
		t.Helper()
		var err error
		if ib, err = inbox.New(d, inbox.Config{Retention: r, Now: clock.Now}); err != nil {
			t.Fatal(err)
		}
		if err := ib.RecordRetention(ctx, "billing"); err != nil {
			t.Fatal(err)
		}
	}
	s, err := dlq.New(d, dlq.Config{Now: clock.Now})
	if err != nil {
		t.Fatal(err)
	}
	pub := &recPublisher{}
	park := func(id string) int64 {
		t.Helper()
		lid, err := s.Park(ctx, dlq.FromMessage("billing", idem.Message{ID: id, Subject: "orders", Payload: []byte(`{}`)}, errors.New("flaky")))
		if err != nil {
			t.Fatal(err)
		}
		return lid
	}
	redrive := func(lid int64) error {
		t.Helper()
		_, err := s.Redrive(ctx, lid, "alice", pub)
		return err
	}

	record(day)
	m := park("M")
	clock.Advance(time.Hour)
	if _, err := ib.Process(ctx, "billing", idem.Message{ID: "M", Subject: "orders", Payload: []byte(`{}`)},
		func(context.Context, TTx, idem.Message) error { return nil }); err != nil {
		t.Fatal(err)
	}
	clock.Advance(2 * day)
	gc, err := retention.New(d, retention.Config{Now: clock.Now})
	if err != nil {
		t.Fatal(err)
	}
	if rep, err := gc.RunOnce(ctx); err != nil || rep.Deleted["inbox"] != 1 {
		t.Fatalf("gc: %+v, %v; want M's record collected", rep, err)
	}
	record(30 * day) // widened
	clock.Advance(2 * day)
	var re *dlq.RefusedError
	if err := redrive(m); !errors.As(err, &re) || re.Reason != dlq.RefusedTooOld || re.Retention != day {
		t.Fatalf("letter of a message recorded under 1 day, after a widening to 30: %v; want refused as older than 1 day", err)
	}
	record(30 * day) // a restart with the same retention keeps the shorter one in force
	if err := redrive(m); !errors.Is(err, dlq.ErrRedriveRefused) {
		t.Fatalf("after a restart: %v; want still refused", err)
	}
	// An operator stating the retention the consumer records now (or a
	// shorter one) is not contradicted by the shorter one of the widening:
	// the letter is refused as too old, which --force can override, and
	// the console shows the retention it is judged by.
	for _, stated := range []time.Duration{30 * day, 10 * day} {
		so, err := dlq.New(d, dlq.Config{Now: clock.Now, InboxRetention: func(string) time.Duration { return stated }})
		if err != nil {
			t.Fatal(err)
		}
		_, err = so.Redrive(ctx, m, "alice", pub)
		if !errors.As(err, &re) || re.Reason != dlq.RefusedTooOld || re.Retention != day {
			t.Fatalf("stated retention %v: %v; want refused as older than 1 day", stated, err)
		}
		l, err := so.Get(ctx, m)
		if err != nil {
			t.Fatal(err)
		}
		if r, err := so.LetterRetention(ctx, l); err != nil || r != day {
			t.Fatalf("stated retention %v: LetterRetention = %v, %v; want 1 day", stated, r, err)
		}
	}

	// A letter that first failed once a day had passed since the widening
	// is judged by 30 days: its message was recorded under them.
	clock.Advance(day)
	late := park("L")
	clock.Advance(5 * day)
	if err := redrive(late); err != nil {
		t.Fatalf("letter after the widening, 5 days old: %v; want redriven", err)
	}

	// Narrowing applies at once.
	record(2 * day)
	narrow := park("N")
	clock.Advance(3 * day)
	if err := redrive(narrow); !errors.As(err, &re) || re.Retention != 2*day {
		t.Fatalf("after narrowing to 2 days, a 3-day-old letter: %v; want refused against 2 days", err)
	}
}

// TestForcedRedriveAuditSaysWhetherItWasForced: the audit entry of a
// redrive with Force says "forced past the replay horizon" only when the
// horizon check refused the letter (a bulk --all --force redrives young
// letters too).
func TestForcedRedriveAuditSaysWhetherItWasForced(t *testing.T) {
	t.Parallel()
	testdb.EachDriver(t, func(t *testing.T, e testdb.Driver) {
		ctx := context.Background()
		clock := testclock.New(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
		s, err := dlq.New(e.D, dlq.Config{Now: clock.Now, InboxRetention: func(string) time.Duration { return time.Hour }})
		if err != nil {
			t.Fatal(err)
		}
		park := func(id string) int64 {
			l, err := s.Park(ctx, dlq.FromMessage("billing", idem.Message{ID: id, Subject: "orders", Payload: []byte(`{}`)}, errors.New("bad")))
			if err != nil {
				t.Fatal(err)
			}
			return l
		}
		old := park("old")
		clock.Advance(2 * time.Hour)
		young := park("young")
		opt := dlq.RedriveOptions{Force: true, Reason: "bulk redrive after the fix"}
		pub := &recPublisher{}
		for _, id := range []int64{old, young} {
			if _, err := s.RedriveWith(ctx, id, "alice", pub, opt); err != nil {
				t.Fatal(err)
			}
		}
		forced := func(message string) int {
			return testdb.Count(t, e.D, `SELECT count(*) FROM `+e.D.Table("audit_log")+` WHERE action = 'dlq.redrive' AND outcome = 'ok'
AND details LIKE '%message="`+message+`"%forced past the replay horizon%'`)
		}
		if forced("old") != 1 || forced("young") != 0 {
			t.Fatalf("audit: old forced %d, young forced %d; want 1 and 0", forced("old"), forced("young"))
		}
	})
}
