package dlq_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/broker"
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
	s, ib := storeAndInbox(t, d, dlq.Config{Now: clock.Now, InboxRetention: func(string) time.Duration { return retain }},
		inbox.Config{Retention: retain, Now: clock.Now})
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
		if l, _ := s.Get(ctx, id); l.State != dlq.Parked || l.RevisionID != "" {
			t.Fatalf("refused letter is %s with revision %q, want parked without one", l.State, l.RevisionID)
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
// same message id, so a revision published again after the first one's
// resolution was lost is a duplicate in the consumer's inbox; revising
// such a letter again needs no force (the inbox record of its original is
// the first revision's own).
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
		// The same payload, as the console re-posts it (indented).
		_, rev, err := s.Revise(ctx, l, "alice", []byte("{\n  \"n\": 1\n}"), pub)
		if err != nil {
			t.Fatal(err)
		}
		if len(lost.msgs) != 1 || rev.ID != lost.msgs[0].ID {
			t.Fatalf("revision ids %v and %q, want one id for every revision of a letter", lost.msgs, rev.ID)
		}
		if got, _ := s.Get(ctx, l); got.State != dlq.Discarded || got.RevisionID != rev.ID {
			t.Fatalf("revised letter: %s with revision %q, want discarded with %q", got.State, got.RevisionID, rev.ID)
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

// TestARevisionThatMayBeOutIsNeverRedrivenBesideIt: when a revision's
// publish fails (the broker may have taken it) or the process is lost
// after the broker took it, before the letter is resolved, the letter
// stays parked with its revision recorded. A redrive of it, a bulk
// redrive, and a forced one publish nothing (the original beside the
// revision would be a second effect); the original re-sent by its producer
// is a duplicate in the consumer's inbox; revising again publishes the
// same revision and resolves the letter; discarding it works too.
func TestARevisionThatMayBeOutIsNeverRedrivenBesideIt(t *testing.T) {
	t.Parallel()
	testdb.EachDriver(t, func(t *testing.T, e testdb.Driver) { testRevisionOut(t, e.D) })
}

func testRevisionOut[TTx any](t *testing.T, d store.Driver[TTx]) {
	ctx := context.Background()
	s, ib := storeAndInbox(t, d, dlq.Config{}, inbox.Config{})
	original := func(id string) idem.Message {
		return idem.Message{ID: id, Subject: "orders", Payload: []byte(`{"n":1}`)}
	}
	for _, c := range []struct {
		name string
		fail func(l int64) (published []idem.Message)
	}{
		{"publish failed after the broker took it", func(l int64) []idem.Message {
			p := &acceptThenFail{err: errors.New("publish timed out")}
			if _, _, err := s.Revise(ctx, l, "alice", []byte(`{"n":2}`), p); err == nil {
				t.Fatal("revise succeeded")
			}
			return p.msgs
		}},
		{"process lost after the publish", func(l int64) []idem.Message {
			p := &panicAfterPublish{}
			func() {
				defer func() {
					if recover() == nil {
						t.Fatal("the publisher did not stop the revision")
					}
				}()
				_, _, _ = s.Revise(ctx, l, "alice", []byte(`{"n":2}`), p)
			}()
			return p.msgs
		}},
	} {
		t.Run(c.name, func(t *testing.T) {
			id := "m-" + c.name
			l, err := s.Park(ctx, dlq.FromMessage("billing", original(id), errors.New("bad")))
			if err != nil {
				t.Fatal(err)
			}
			out := c.fail(l)
			if len(out) != 1 {
				t.Fatalf("%d revisions out, want 1", len(out))
			}
			got, err := s.Get(ctx, l)
			if err != nil || got.State != dlq.Parked || got.RevisionID != out[0].ID {
				t.Fatalf("letter after a revision that may be out: %s, revision %q (%v); want parked with %q", got.State, got.RevisionID, err, out[0].ID)
			}
			pub := &recPublisher{}
			if _, err := s.Redrive(ctx, l, "bob", pub); !errors.Is(err, dlq.ErrRevisionPending) {
				t.Fatalf("redrive: %v, want ErrRevisionPending", err)
			}
			if _, err := s.RedriveWith(ctx, l, "bob", pub, dlq.RedriveOptions{Force: true, Reason: "the customer asked"}); !errors.Is(err, dlq.ErrRevisionPending) {
				t.Fatalf("forced redrive: %v, want ErrRevisionPending", err)
			}
			if n, err := s.RedriveAll(ctx, dlq.Filter{Consumer: "billing"}, "bob", pub, nil); !errors.Is(err, dlq.ErrRevisionPending) {
				t.Fatalf("redrive all: %d, %v; want the letter skipped with ErrRevisionPending", n, err)
			}
			if pub.count() != 0 {
				t.Fatalf("%d original(s) published beside the revision", pub.count())
			}
			// An older program's claim, which does not know the revision,
			// fails before it could publish.
			if _, err := d.Pool().Exec(ctx, `UPDATE `+d.Table("dead_letters")+` SET state = 'redriven' WHERE id = $1 AND state = 'parked'`, l); err == nil {
				t.Fatal("the schema let a letter with a revision be marked redriven")
			}
			ran := false
			res, err := ib.Process(ctx, "billing", original(id), func(context.Context, TTx, idem.Message) error { ran = true; return nil })
			if err != nil || res != inbox.Duplicate || ran {
				t.Fatalf("the original re-sent: %v, %v, handler ran %v; want a duplicate", res, err, ran)
			}
			if got, _ := s.Get(ctx, l); got.State != dlq.Parked {
				t.Fatalf("letter %s after refused redrives, want parked", got.State)
			}
			_, rev, err := s.Revise(ctx, l, "alice", []byte(`{"n":2}`), pub)
			if err != nil || rev.ID != out[0].ID || pub.count() != 1 {
				t.Fatalf("revise again: %q, %v (%d published); want revision %q", rev.ID, err, pub.count(), out[0].ID)
			}
			if got, _ := s.Get(ctx, l); got.State != dlq.Discarded {
				t.Fatalf("letter %s after its revision, want discarded", got.State)
			}
		})
	}
	t.Run("another payload", func(t *testing.T) {
		l, err := s.Park(ctx, dlq.FromMessage("billing", original("m-other-payload"), errors.New("bad")))
		if err != nil {
			t.Fatal(err)
		}
		lost := &acceptThenFail{err: errors.New("publish timed out")}
		if _, _, err := s.Revise(ctx, l, "alice", []byte(`{"n":2}`), lost); err == nil {
			t.Fatal("revise succeeded")
		}
		if got, _ := s.Get(ctx, l); string(got.RevisionPayload) != `{"n":2}` {
			t.Fatalf("recorded revision payload %q", got.RevisionPayload)
		}
		// A second operator's edit would go out under the same id.
		pub := &recPublisher{}
		if _, _, err := s.Revise(ctx, l, "bob", []byte(`{"n":3}`), pub); !errors.Is(err, dlq.ErrRevisionPending) || pub.count() != 0 {
			t.Fatalf("revise again with another payload: %v (%d published), want ErrRevisionPending", err, pub.count())
		}
		_, rev, err := s.ReviseWith(ctx, l, "bob", []byte(`{"n":3}`), pub, dlq.ReviseOptions{Force: true, Reason: "the first never reached the broker"})
		if err != nil || rev.ID != lost.msgs[0].ID || string(rev.Payload) != `{"n":3}` {
			t.Fatalf("forced revise with another payload: %q %q, %v", rev.ID, rev.Payload, err)
		}
	})
	t.Run("another payload the broker drops", func(t *testing.T) {
		l, err := s.Park(ctx, dlq.FromMessage("billing", original("m-dropped"), errors.New("bad")))
		if err != nil {
			t.Fatal(err)
		}
		if _, _, err := s.Revise(ctx, l, "alice", []byte(`{"n":2}`), &acceptThenFail{err: errors.New("publish timed out")}); err == nil {
			t.Fatal("revise succeeded")
		}
		// The broker kept the first publish: the second, with another
		// payload, is a duplicate of it, and the first is what is out.
		_, _, err = s.ReviseWith(ctx, l, "bob", []byte(`{"n":3}`), dupPublisher{}, dlq.ReviseOptions{Force: true, Reason: "the first never reached the broker"})
		if !errors.Is(err, dlq.ErrDroppedAsDuplicate) {
			t.Fatalf("forced revise the broker dropped: %v, want ErrDroppedAsDuplicate", err)
		}
		if got, _ := s.Get(ctx, l); got.State != dlq.Discarded || string(got.RevisionPayload) != `{"n":2}` {
			t.Fatalf("letter %s with revision payload %q, want discarded with the first payload", got.State, got.RevisionPayload)
		}
		if n := testdb.Count(t, d, `SELECT count(*) FROM `+d.Table("audit_log")+` WHERE action = 'dlq.revise' AND target = $1
AND outcome LIKE 'failed%' AND details LIKE '%dropped by the broker%another payload%forced%'`, fmt.Sprintf("letter %d", l)); n != 1 {
			t.Fatalf("%d audit entries say the forced revision was dropped, want 1", n)
		}
	})
	t.Run("forced too old, then published again", func(t *testing.T) {
		l, err := s.Park(ctx, dlq.FromMessage("billing", original("m-too-old"), errors.New("bad")))
		if err != nil {
			t.Fatal(err)
		}
		aged, err := dlq.New(d, dlq.Config{Now: func() time.Time { return time.Now().Add(30 * 24 * time.Hour) }})
		if err != nil {
			t.Fatal(err)
		}
		if _, _, err := aged.ReviseWith(ctx, l, "alice", []byte(`{"n":2}`), &acceptThenFail{err: errors.New("publish timed out")},
			dlq.ReviseOptions{Force: true, Reason: "checked the ledger"}); err == nil || errors.Is(err, dlq.ErrRedriveRefused) {
			t.Fatalf("forced revise of a letter older than the retention: %v, want the publish's error", err)
		}
		// The inbox record it wrote is its own: published again without force.
		pub := &recPublisher{}
		if _, _, err := aged.Revise(ctx, l, "alice", []byte(`{"n":2}`), pub); err != nil || pub.count() != 1 {
			t.Fatalf("revise again: %v (%d published)", err, pub.count())
		}
	})
	t.Run("a later copy's record", func(t *testing.T) {
		id := "m-later-copy"
		l, err := s.Park(ctx, dlq.FromMessage("billing", original(id), errors.New("bad")))
		if err != nil {
			t.Fatal(err)
		}
		if _, _, err := s.Revise(ctx, l, "alice", []byte(`{"n":2}`), &acceptThenFail{err: errors.New("publish timed out")}); err == nil {
			t.Fatal("revise succeeded")
		}
		// The revision's record of the original is collected, then the
		// producer re-sends the original, which is applied.
		if _, err := d.Pool().Exec(ctx, `DELETE FROM `+d.Table("inbox")+` WHERE consumer = 'billing' AND message_id = $1`, id); err != nil {
			t.Fatal(err)
		}
		if res, err := ib.Process(ctx, "billing", original(id), func(context.Context, TTx, idem.Message) error { return nil }); err != nil || res != inbox.Processed {
			t.Fatalf("the original re-sent after the collection: %v %v", res, err)
		}
		pub := &recPublisher{}
		var re *dlq.RefusedError
		if _, _, err := s.Revise(ctx, l, "alice", []byte(`{"n":2}`), pub); !errors.As(err, &re) || re.Reason != dlq.RefusedOriginalProcessed || pub.count() != 0 {
			t.Fatalf("revise again after the original was applied: %v (%d published), want refused %s", err, pub.count(), dlq.RefusedOriginalProcessed)
		}
	})
	t.Run("discarded instead", func(t *testing.T) {
		l, err := s.Park(ctx, dlq.FromMessage("billing", original("m-discard"), errors.New("bad")))
		if err != nil {
			t.Fatal(err)
		}
		if _, _, err := s.Revise(ctx, l, "alice", []byte(`{"n":2}`), &acceptThenFail{err: errors.New("down")}); err == nil {
			t.Fatal("revise succeeded")
		}
		if err := s.Discard(ctx, l, "bob"); err != nil {
			t.Fatalf("discard a letter with a revision that may be out: %v", err)
		}
	})
}

// storeAndInbox is a dead-letter store and an inbox on d.
func storeAndInbox[TTx any](t *testing.T, d store.Driver[TTx], sc dlq.Config, ic inbox.Config) (*dlq.Store[TTx], *inbox.Inbox[TTx]) {
	t.Helper()
	s, err := dlq.New(d, sc)
	if err != nil {
		t.Fatal(err)
	}
	ib, err := inbox.New(d, ic)
	if err != nil {
		t.Fatal(err)
	}
	return s, ib
}

// dupPublisher reports every message as a duplicate the broker dropped.
type dupPublisher struct{}

func (dupPublisher) Publish(context.Context, ...idem.Message) error { return nil }
func (dupPublisher) PublishResults(_ context.Context, msgs ...idem.Message) ([]broker.PublishResult, error) {
	res := make([]broker.PublishResult, len(msgs))
	for i, m := range msgs {
		res[i] = broker.PublishResult{ID: m.ID, Duplicate: true}
	}
	return res, nil
}
func (dupPublisher) Close() error { return nil }

// panicAfterPublish records the messages as published, then stops the
// caller as a lost process would.
type panicAfterPublish struct{ msgs []idem.Message }

func (p *panicAfterPublish) Publish(_ context.Context, msgs ...idem.Message) error {
	p.msgs = append(p.msgs, msgs...)
	panic("process lost")
}
func (p *panicAfterPublish) Close() error { return nil }

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
