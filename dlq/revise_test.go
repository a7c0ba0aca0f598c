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
	"github.com/idemkit/idem/store"
)

// TestReviseRefusesWhatMayHaveBeenApplied: a revision is a new message id,
// which no inbox recognises, so Revise refuses a letter whose original the
// consumer applied meanwhile (a re-sent copy), a second letter of an id
// whose first letter was revised, and a letter older than the inbox
// retention; a refusal publishes nothing and leaves the letter parked;
// Force needs a reason. A letter whose original failed for good in a
// claiming inbox (a "failed" record) is revised.
func TestReviseRefusesWhatMayHaveBeenApplied(t *testing.T) {
	t.Parallel()
	testdb.EachDriver(t, func(t *testing.T, e testdb.Driver) { testReviseRefuses(t, e.D) })
}

func testReviseRefuses[TTx any](t *testing.T, d store.Driver[TTx]) {
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
	msg := func(id string) idem.Message {
		return idem.Message{ID: id, Subject: "orders", Payload: []byte(`{"n":1}`)}
	}
	parkMsg := func(m idem.Message) int64 {
		t.Helper()
		l, err := s.Park(ctx, dlq.FromMessage("billing", m, errors.New("timeout, attempts exhausted")))
		if err != nil {
			t.Fatal(err)
		}
		return l
	}
	park := func(id string) int64 {
		t.Helper()
		l, err := s.Park(ctx, dlq.FromMessage("billing", msg(id), errors.New("timeout, attempts exhausted")))
		if err != nil {
			t.Fatal(err)
		}
		return l
	}
	refused := func(id int64, reason string) {
		t.Helper()
		before := pub.count()
		_, _, err := s.Revise(ctx, id, "alice", []byte(`{"n":2}`), pub)
		var re *dlq.RefusedError
		if !errors.Is(err, dlq.ErrRedriveRefused) || !errors.As(err, &re) || re.Reason != reason {
			t.Fatalf("revise of letter %d: err = %v, want refusal %s", id, err, reason)
		}
		if pub.count() != before {
			t.Fatal("a refused revision published")
		}
		if l, _ := s.Get(ctx, id); l.State != dlq.Parked {
			t.Fatalf("refused letter is %s, want parked", l.State)
		}
	}

	// The producer sent the message again and the consumer applied it:
	// the letter's revision would be a second effect.
	applied := park("m-applied")
	if res, err := ib.Process(ctx, "billing", msg("m-applied"), func(context.Context, TTx, idem.Message) error { return nil }); err != nil || res != inbox.Processed {
		t.Fatalf("re-sent copy: %v %v", res, err)
	}
	refused(applied, dlq.RefusedOriginalProcessed)
	if _, _, err := s.ReviseWith(ctx, applied, "alice", []byte(`{"n":2}`), pub, dlq.ReviseOptions{Force: true}); !errors.Is(err, idem.ErrInvalidOption) {
		t.Fatalf("force without reason: %v", err)
	}
	if _, _, err := s.ReviseWith(ctx, applied, "alice", []byte(`{"n":2}`), pub,
		dlq.ReviseOptions{Force: true, Reason: "the edit adds what the copy lacked"}); err != nil || pub.count() != 1 {
		t.Fatalf("forced revision: %v (published %d)", err, pub.count())
	}

	// Two letters of one id (two payloads): the first revision records
	// the id, the second is refused.
	first := park("m-twice")
	second := parkMsg(idem.Message{ID: "m-twice", Subject: "orders", Payload: []byte(`{"n":7}`)})
	if first == second {
		t.Fatal("two payloads of one id share a letter")
	}
	if _, _, err := s.Revise(ctx, first, "alice", []byte(`{"n":2}`), pub); err != nil {
		t.Fatal(err)
	}
	refused(second, dlq.RefusedOriginalProcessed)

	// Older than the inbox retention, no record: it may have been applied
	// and collected.
	old := park("m-old")
	clock.Advance(retain + time.Hour)
	refused(old, dlq.RefusedTooOld)
	if n := testdb.Count(t, d, `SELECT count(*) FROM `+d.Table("inbox")+` WHERE message_id = 'm-old'`); n != 0 {
		t.Fatalf("a refused revision left %d inbox row(s)", n)
	}

	// A young letter whose id the inbox does not hold is revised; with
	// Force set, its audit entry does not say forced (nothing was refused),
	// while the forced revision above does.
	young := park("m-young")
	if _, _, err := s.ReviseWith(ctx, young, "alice", []byte(`{"n":2}`), pub, dlq.ReviseOptions{Force: true, Reason: "bulk"}); err != nil {
		t.Fatal(err)
	}
	forced := func(message string) int {
		return testdb.Count(t, d, `SELECT count(*) FROM `+d.Table("audit_log")+` WHERE action = 'dlq.revise' AND outcome = 'ok'
AND details LIKE '%original message="`+message+`"%forced past the replay check%'`)
	}
	if forced("m-applied") != 1 || forced("m-young") != 0 {
		t.Fatalf("audit: m-applied forced %d, m-young forced %d; want 1 and 0", forced("m-applied"), forced("m-young"))
	}
}

// TestReviseAgainAfterALostCommit: every revision of one letter has the
// same message id, so a revision published again, after the first one's
// transaction did not commit, is a duplicate of it for the consumer.
func TestReviseAgainAfterALostCommit(t *testing.T) {
	t.Parallel()
	testdb.EachDriver(t, func(t *testing.T, e testdb.Driver) {
		ctx := context.Background()
		s, err := dlq.New(e.D, dlq.Config{})
		if err != nil {
			t.Fatal(err)
		}
		l, err := s.Park(ctx, dlq.FromMessage("billing", idem.Message{ID: "m-1", Subject: "orders", Payload: []byte(`{}`)}, errors.New("bad")))
		if err != nil {
			t.Fatal(err)
		}
		// The broker takes the revision, then the transaction fails.
		lost := &acceptThenFail{err: errors.New("connection lost after the publish")}
		if _, _, err := s.Revise(ctx, l, "alice", []byte(`{"n":1}`), lost); err == nil {
			t.Fatal("revise succeeded")
		}
		pub := &recPublisher{}
		_, rev, err := s.Revise(ctx, l, "alice", []byte(`{"n":2}`), pub)
		if err != nil {
			t.Fatal(err)
		}
		if len(lost.msgs) != 1 || rev.ID != lost.msgs[0].ID {
			t.Fatalf("revision ids %v and %q, want one id for every revision of a letter", lost.msgs, rev.ID)
		}
		other, err := s.Park(ctx, dlq.FromMessage("billing", idem.Message{ID: "m-2", Subject: "orders", Payload: []byte(`{}`)}, errors.New("bad")))
		if err != nil {
			t.Fatal(err)
		}
		if _, rev2, err := s.Revise(ctx, other, "alice", []byte(`{"n":2}`), pub); err != nil || rev2.ID == rev.ID {
			t.Fatalf("another letter's revision: %q, %v; want its own id", rev2.ID, err)
		}
	})
}

// TestReviseCommitsWhenTheCallerGoesAway: once the broker accepted the
// revision, the caller's context ending (a closed browser tab) does not
// roll the letter's resolution back.
func TestReviseCommitsWhenTheCallerGoesAway(t *testing.T) {
	t.Parallel()
	testdb.EachDriver(t, func(t *testing.T, e testdb.Driver) {
		s, err := dlq.New(e.D, dlq.Config{})
		if err != nil {
			t.Fatal(err)
		}
		l, err := s.Park(context.Background(), dlq.FromMessage("billing", idem.Message{ID: "m-1", Subject: "orders", Payload: []byte(`{}`)}, errors.New("bad")))
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithCancel(context.Background())
		pub := &cancelAfterPublish{cancel: cancel}
		if _, _, err := s.Revise(ctx, l, "alice", []byte(`{"n":1}`), pub); err != nil {
			t.Fatalf("revise: %v", err)
		}
		if got, _ := s.Get(context.Background(), l); got.State != dlq.Discarded || pub.n != 1 {
			t.Fatalf("letter %s after a published revision (%d published), want discarded", got.State, pub.n)
		}
	})
}

// acceptThenFail records the messages as published, then fails.
type acceptThenFail struct {
	msgs []idem.Message
	err  error
}

func (p *acceptThenFail) Publish(_ context.Context, msgs ...idem.Message) error {
	p.msgs = append(p.msgs, msgs...)
	return p.err
}
func (p *acceptThenFail) Close() error { return nil }

// cancelAfterPublish accepts the messages, then cancels the caller's
// context.
type cancelAfterPublish struct {
	cancel context.CancelFunc
	n      int
}

func (p *cancelAfterPublish) Publish(_ context.Context, msgs ...idem.Message) error {
	p.n += len(msgs)
	p.cancel()
	return nil
}
func (p *cancelAfterPublish) Close() error { return nil }
