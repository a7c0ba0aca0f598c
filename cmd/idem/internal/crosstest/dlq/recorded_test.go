package dlq_test

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/broker/memory"
	"github.com/idemkit/idem/cmd/idem/console"
	"github.com/idemkit/idem/consumer"
	"github.com/idemkit/idem/dlq"
	"github.com/idemkit/idem/inbox"
	"github.com/idemkit/idem/internal/operator"
	"github.com/idemkit/idem/internal/testclock"
	"github.com/idemkit/idem/internal/testdb"
	"github.com/idemkit/idem/store"
)

// A consumer records its inbox retention when it starts, and a redrive is
// judged by that, not by what the caller claims: a longer claim is
// refused (even forced), a letter older than the recorded retention is
// refused without --force and a reason, and a shorter claim is used.
func TestRedriveUsesRecordedRetention(t *testing.T) {
	t.Parallel()
	testdb.EachDriver(t, func(t *testing.T, e testdb.Driver) { testRedriveUsesRecordedRetention(t, e.D) })
}

func testRedriveUsesRecordedRetention[TTx any](t *testing.T, d store.Driver[TTx]) {
	ctx := context.Background()
	clock := testclock.New(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	startConsumer(t, d, "billing", 24*time.Hour, clock.Now)

	pub := &recPublisher{}
	claim := func(r time.Duration) func(string) time.Duration { return func(string) time.Duration { return r } }
	store := func(c func(string) time.Duration) *dlq.Store[TTx] {
		s, err := dlq.New(d, dlq.Config{Now: clock.Now, InboxRetention: c})
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	trusting, plain := store(claim(30*24*time.Hour)), store(nil)
	park := func(id string, age time.Duration) int64 {
		t.Helper()
		l := dlq.FromMessage("billing", idem.Message{ID: id, Subject: "orders", Payload: []byte(`{}`)}, idem.Permanent(errors.New("bad")))
		l.LastFailedAt = clock.Now().Add(-age)
		n, err := plain.Park(ctx, l)
		if err != nil {
			t.Fatal(err)
		}
		return n
	}
	parked := func(id int64) {
		t.Helper()
		if pub.count() != 0 {
			t.Fatalf("a refused redrive published %d message(s)", pub.count())
		}
		if l, _ := plain.Get(ctx, id); l.State != dlq.Parked {
			t.Fatalf("refused letter %d is %s, want parked", id, l.State)
		}
	}

	// Two days old: the consumer's 24h are past. A claim of 30 days does
	// not widen them, even forced.
	old := park("two-days", 48*time.Hour)
	if _, err := trusting.Redrive(ctx, old, "mallory", pub); !errors.Is(err, dlq.ErrRetentionOverstated) {
		t.Fatalf("redrive claiming 30 days for a 24h consumer: %v, want ErrRetentionOverstated", err)
	}
	if _, err := trusting.RedriveWith(ctx, old, "mallory", pub, dlq.RedriveOptions{Force: true, Reason: "trust me"}); !errors.Is(err, dlq.ErrRetentionOverstated) {
		t.Fatalf("forced redrive claiming 30 days: %v, want ErrRetentionOverstated", err)
	}
	if _, err := trusting.InboxRetention(ctx, "billing"); !errors.Is(err, dlq.ErrRetentionOverstated) {
		t.Fatalf("InboxRetention with a 30-day claim: %v", err)
	}
	parked(old)
	// Without a claim the recorded 24h apply (not the 7-day default).
	var re *dlq.RefusedError
	if _, err := plain.Redrive(ctx, old, "alice", pub); !errors.As(err, &re) || re.Reason != dlq.RefusedTooOld || re.Retention != 24*time.Hour {
		t.Fatalf("redrive of a 2-day-old letter of a 24h consumer: %v, want a refusal against 24h", err)
	}
	if r, err := plain.InboxRetention(ctx, "billing"); err != nil || r != 24*time.Hour {
		t.Fatalf("InboxRetention = %v, %v; want the recorded 24h", r, err)
	}
	parked(old)
	l, err := plain.RedriveWith(ctx, old, "alice", pub, dlq.RedriveOptions{Force: true, Reason: "checked the ledger"})
	if err != nil || pub.count() != 1 {
		t.Fatalf("forced redrive: %v (published %d)", err, pub.count())
	}
	if l, _ = plain.Get(ctx, l.ID); l.State != dlq.Redriven || l.RedriveReason != "checked the ledger" {
		t.Fatalf("forced letter: %+v", l)
	}

	// A shorter claim is used: 13 hours old is past a 12-hour claim.
	pub = &recPublisher{}
	mid := park("thirteen-hours", 13*time.Hour)
	if _, err := store(claim(12*time.Hour)).Redrive(ctx, mid, "alice", pub); !errors.As(err, &re) || re.Retention != 12*time.Hour {
		t.Fatalf("redrive with a 12h claim: %v, want a refusal against 12h", err)
	}
	parked(mid)
	// Within the recorded retention a redrive goes through.
	if _, err := plain.Redrive(ctx, mid, "alice", pub); err != nil || pub.count() != 1 {
		t.Fatalf("redrive of a 13h-old letter of a 24h consumer: %v", err)
	}

	// A consumer that recorded nothing: the 7-day default, and no claim
	// beyond it is believed.
	l = dlq.FromMessage("ghost", idem.Message{ID: "g", Subject: "orders", Payload: []byte(`{}`)}, idem.Permanent(errors.New("bad")))
	l.LastFailedAt = clock.Now().Add(-10 * 24 * time.Hour)
	ghost, err := plain.Park(ctx, l)
	if err != nil {
		t.Fatal(err)
	}
	pub = &recPublisher{}
	if _, err := store(claim(100000*time.Hour)).Redrive(ctx, ghost, "mallory", pub); !errors.Is(err, dlq.ErrRetentionOverstated) {
		t.Fatalf("claim of 100000h for a consumer that recorded nothing: %v", err)
	}
	if _, err := plain.Redrive(ctx, ghost, "alice", pub); !errors.As(err, &re) || re.Retention != dlq.DefaultInboxRetention {
		t.Fatalf("10-day-old letter of an unrecorded consumer: %v, want a refusal against 7 days", err)
	}
	parked(ghost)
}

// startConsumer runs a consumer named name with inbox retention retain
// on an in-memory broker until it has started, then stops it.
func startConsumer[TTx any](t *testing.T, d store.Driver[TTx], name string, retain time.Duration, now func() time.Time) {
	t.Helper()
	b, err := memory.New(memory.Config{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { b.Close() })
	sub, err := b.Subscribe("orders", name)
	if err != nil {
		t.Fatal(err)
	}
	ib, err := inbox.New(d, inbox.Config{Retention: time.Hour, RetentionFor: map[string]time.Duration{name: retain}, Now: now})
	if err != nil {
		t.Fatal(err)
	}
	c, err := consumer.New(ib, sub, consumer.Config[TTx]{Name: name, FetchWait: 10 * time.Millisecond,
		Handler: func(context.Context, TTx, idem.Message) error { return nil }})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- c.Run(ctx) }()
	deadline := time.Now().Add(10 * time.Second)
	for {
		r, found, err := operator.RecordedRetention(ctx, d, name)
		if err != nil {
			t.Fatal(err)
		}
		if found && r.Retention == retain {
			break
		}
		if time.Now().After(deadline) {
			cancel()
			t.Fatalf("consumer %q did not record its inbox retention %s", name, retain)
		}
		time.Sleep(10 * time.Millisecond)
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}

// Every redrive, discard and revision is in the operator audit log, with
// its actor and reason, whoever calls the store.
func TestActionsAreAudited(t *testing.T) {
	t.Parallel()
	testdb.EachDriver(t, func(t *testing.T, e testdb.Driver) { testActionsAreAudited(t, e.D) })
}

func testActionsAreAudited[TTx any](t *testing.T, d store.Driver[TTx]) {
	ctx := context.Background()
	s, err := dlq.New(d, dlq.Config{})
	if err != nil {
		t.Fatal(err)
	}
	pub := &recPublisher{}
	var ids []int64
	for _, id := range []string{"a", "b", "c"} {
		n, err := s.Park(ctx, dlq.FromMessage("billing", idem.Message{ID: id, Subject: "orders", Payload: []byte(`{"n":1}`)}, idem.Permanent(errors.New("bad"))))
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, n)
	}
	if _, err := s.RedriveWith(ctx, ids[0], "alice", pub, dlq.RedriveOptions{Reason: "bug fixed"}); err != nil {
		t.Fatal(err)
	}
	if err := s.DiscardWith(ctx, ids[1], "bob", dlq.DiscardOptions{Reason: "test order"}); err != nil {
		t.Fatal(err)
	}
	_, rev, err := s.ReviseWith(ctx, ids[2], "carol", []byte(`{"n":2}`), pub, dlq.ReviseOptions{Reason: "typo"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.Redrive(ctx, ids[0], "dave", pub); !errors.Is(err, dlq.ErrNotParked) {
		t.Fatalf("second redrive: %v", err)
	}
	es, err := console.ListAudit(ctx, d, console.AuditFilter{})
	if err != nil {
		t.Fatal(err)
	}
	type row struct{ actor, action, target, reason, outcome string }
	letter := func(i int) string { return "letter " + strconv.FormatInt(ids[i], 10) }
	want := []row{ // newest first
		{"dave", "dlq.redrive", letter(0), "", "failed"},
		{"carol", "dlq.revise", letter(2), "typo", "ok"},
		{"bob", "dlq.discard", letter(1), "test order", "ok"},
		{"alice", "dlq.redrive", letter(0), "bug fixed", "ok"},
	}
	if len(es) != len(want) {
		t.Fatalf("audit log has %d entries, want %d: %+v", len(es), len(want), es)
	}
	for i, e := range es {
		got := row{e.Actor, e.Action, e.Target, e.Reason, e.Outcome}
		got.outcome, _, _ = strings.Cut(got.outcome, ":")
		if got != want[i] || e.EndedAt.IsZero() {
			t.Errorf("audit entry %d = %+v, want %+v", i, e, want[i])
		}
	}
	if !strings.Contains(es[1].Details, rev.ID) || !strings.Contains(es[1].Details, `original message="c"`) ||
		!strings.Contains(es[3].Details, `consumer="billing" message="a"`) {
		t.Errorf("audit details: %q / %q", es[1].Details, es[3].Details)
	}
}

// recPublisher records published messages; fail makes Publish fail.
type recPublisher struct {
	mu   sync.Mutex
	msgs []idem.Message
	fail error
}

func (p *recPublisher) Publish(_ context.Context, msgs ...idem.Message) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.fail != nil {
		return p.fail
	}
	p.msgs = append(p.msgs, msgs...)
	return nil
}
func (p *recPublisher) Close() error { return nil }
func (p *recPublisher) count() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.msgs)
}
