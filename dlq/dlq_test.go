package dlq_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/broker"
	"github.com/idemkit/idem/broker/memory"
	"github.com/idemkit/idem/dlq"
	"github.com/idemkit/idem/internal/testdb"
	"github.com/idemkit/idem/store"
)

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

func TestStore(t *testing.T) {
	t.Parallel()
	testdb.EachDriver(t, func(t *testing.T, e testdb.Driver) { testStore(t, e.D) })
}

func testStore[TTx any](t *testing.T, d store.Driver[TTx]) {
	ctx := context.Background()
	s, err := dlq.New(d, dlq.Config{})
	if err != nil {
		t.Fatal(err)
	}
	msg := idem.Message{ID: "m-1", Subject: "orders", Key: "order-1", Headers: map[string]string{"ce-type": "x"},
		Payload: []byte(`{"a":1}`), Attempt: 1, Position: "7"}
	cause := idem.Permanent(errors.New("bad order"))
	id1, err := s.Park(ctx, dlq.FromMessage("billing", msg, cause))
	if err != nil {
		t.Fatal(err)
	}
	// The same message parked again updates the letter.
	msg.Attempt = 2
	id2, err := s.Park(ctx, dlq.FromMessage("billing", msg, cause))
	if err != nil {
		t.Fatal(err)
	}
	if id1 != id2 {
		t.Fatalf("same message parked twice: ids %d and %d, want one letter", id1, id2)
	}
	// Same id, other payload: its own letter, nothing lost.
	other := msg
	other.Payload = []byte(`{"a":2}`)
	idOther, err := s.Park(ctx, dlq.FromMessage("billing", other, idem.ErrFingerprintMismatch))
	if err != nil {
		t.Fatal(err)
	}
	if idOther == id1 {
		t.Fatal("a different payload under the same id must get its own letter")
	}
	// Parked in a rolled-back transaction: invisible.
	tx, err := d.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.ParkTx(ctx, tx, dlq.FromMessage("billing", idem.Message{ID: "m-rb", Payload: []byte("x")}, cause)); err != nil {
		t.Fatal(err)
	}
	if err := d.Rollback(ctx, tx); err != nil {
		t.Fatal(err)
	}
	if n := testdb.Count(t, d, `SELECT count(*) FROM `+d.Table("dead_letters")); n != 2 {
		t.Fatalf("dead_letters rows = %d, want 2", n)
	}

	l, err := s.Get(ctx, id1)
	if err != nil {
		t.Fatal(err)
	}
	if l.Attempts != 2 || l.State != dlq.Parked || l.Source != "orders" || l.Position != "7" || l.Key != "order-1" ||
		l.Headers["ce-type"] != "x" || string(l.Payload) != `{"a":1}` || l.ErrorClass != "permanent" || l.Error == "" ||
		l.FirstFailedAt.IsZero() || l.LastFailedAt.Before(l.FirstFailedAt) {
		t.Fatalf("letter lacks context: %+v", l)
	}
	if _, err := s.Get(ctx, 999999); !errors.Is(err, idem.ErrNotFound) {
		t.Fatalf("Get(missing) = %v, want ErrNotFound", err)
	}

	// Filters.
	got, err := s.List(ctx, dlq.Filter{Consumer: "billing", ErrorClass: "fingerprint_mismatch"})
	if err != nil || len(got) != 1 || got[0].ID != idOther {
		t.Fatalf("List(class) = %v, %v", got, err)
	}
	got, err = s.List(ctx, dlq.Filter{Until: time.Now().Add(-time.Hour)})
	if err != nil || len(got) != 0 {
		t.Fatalf("List(until) = %d, %v", len(got), err)
	}
	counts, err := s.CountParked(ctx)
	if err != nil || counts["billing"] != 2 {
		t.Fatalf("CountParked = %v, %v", counts, err)
	}

	// Redrive: a failing publish leaves it parked.
	pub := &recPublisher{fail: errors.New("broker down")}
	if _, err := s.Redrive(ctx, id1, "alice", pub); err == nil {
		t.Fatal("redrive with a failing publisher succeeded")
	}
	if l, _ := s.Get(ctx, id1); l.State != dlq.Parked {
		t.Fatalf("state after failed redrive = %s", l.State)
	}
	pub.fail = nil
	l, err = s.Redrive(ctx, id1, "alice", pub)
	if err != nil {
		t.Fatal(err)
	}
	if pub.count() != 1 || pub.msgs[0].ID != "m-1" || pub.msgs[0].Subject != "orders" || pub.msgs[0].Headers["ce-type"] != "x" {
		t.Fatalf("republished %+v", pub.msgs)
	}
	l, _ = s.Get(ctx, id1)
	if l.State != dlq.Redriven || l.RedrivenBy != "alice" || l.RedrivenAt.IsZero() || l.ResolvedAt.IsZero() {
		t.Fatalf("after redrive: %+v", l)
	}
	if _, err := s.Redrive(ctx, id1, "bob", pub); !errors.Is(err, dlq.ErrNotParked) {
		t.Fatalf("second redrive = %v, want ErrNotParked", err)
	}
	if pub.count() != 1 {
		t.Fatal("second redrive published again")
	}
	// Discard.
	if err := s.Discard(ctx, idOther, "carol"); err != nil {
		t.Fatal(err)
	}
	if err := s.Discard(ctx, idOther, "carol"); !errors.Is(err, dlq.ErrNotParked) {
		t.Fatalf("second discard = %v", err)
	}
	if _, err := s.Redrive(ctx, idOther, "bob", pub); !errors.Is(err, dlq.ErrNotParked) {
		t.Fatalf("redrive of a discarded letter = %v", err)
	}
	// After redrive the same message can be parked afresh.
	if id3, err := s.Park(ctx, dlq.FromMessage("billing", msg, cause)); err != nil || id3 == id1 {
		t.Fatalf("re-park after redrive: %d, %v", id3, err)
	}
}

func TestRedriveAllConcurrent(t *testing.T) {
	t.Parallel()
	testdb.EachDriver(t, func(t *testing.T, e testdb.Driver) { testRedriveAllConcurrent(t, e.D) })
}

// Two operators redrive everything at once: every letter is published once.
func testRedriveAllConcurrent[TTx any](t *testing.T, d store.Driver[TTx]) {
	ctx := context.Background()
	s, err := dlq.New(d, dlq.Config{})
	if err != nil {
		t.Fatal(err)
	}
	const n = 30
	for i := range n {
		msg := idem.Message{ID: "m-" + string(rune('a'+i%26)) + string(rune('a'+i/26)), Subject: "s", Payload: []byte("p")}
		if _, err := s.Park(ctx, dlq.FromMessage("c", msg, errors.New("boom"))); err != nil {
			t.Fatal(err)
		}
	}
	pub := &recPublisher{}
	var wg sync.WaitGroup
	var mu sync.Mutex
	total := 0
	var lastProgress [2]int
	for range 2 {
		wg.Go(func() {
			done, err := s.RedriveAll(ctx, dlq.Filter{Consumer: "c"}, "ops", pub, func(done, tot int) {
				mu.Lock()
				if tot > lastProgress[1] { // the first to list sees all n
					lastProgress = [2]int{done, tot}
				}
				mu.Unlock()
			})
			if err != nil {
				t.Error(err)
			}
			mu.Lock()
			total += done
			mu.Unlock()
		})
	}
	wg.Wait()
	if total != n || pub.count() != n {
		t.Fatalf("redriven %d, published %d, want %d each", total, pub.count(), n)
	}
	if lastProgress[1] != n {
		t.Fatalf("progress total = %d", lastProgress[1])
	}
	if c := testdb.Count(t, d, `SELECT count(*) FROM `+d.Table("dead_letters")+` WHERE state = 'redriven'`); c != n {
		t.Fatalf("redriven rows = %d", c)
	}
}

// A redrive inside the broker's duplicate window (JetStream remembers the
// original id) is still delivered: the redrive is deduplicated under its own
// id, and the consumer receives the original message id.
func TestRedriveInsideDuplicateWindow(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	d := testdb.SQLite(t)
	s, _ := dlq.New(d, dlq.Config{})
	b, err := memory.New(memory.Config{DedupWindow: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	msg := idem.Message{ID: "m-1", Subject: "orders", Payload: []byte("x")}
	if err := b.Publisher().Publish(ctx, msg); err != nil {
		t.Fatal(err)
	}
	// A plain republish of the same id is dropped by the window...
	if res, err := b.Publisher().PublishResults(ctx, msg); err != nil || !res[0].Duplicate {
		t.Fatalf("plain republish: %v %v, want a duplicate", res, err)
	}
	id, _ := s.Park(ctx, dlq.FromMessage("c", msg, idem.Permanent(errors.New("bad"))))
	// ...the redrive is not.
	if _, err := s.Redrive(ctx, id, "ops", b.Publisher()); err != nil {
		t.Fatalf("redrive = %v", err)
	}
	if l, _ := s.Get(ctx, id); l.State != dlq.Redriven {
		t.Fatalf("state = %s, want redriven", l.State)
	}
	got := b.Messages("orders")
	if len(got) != 2 || got[1].ID != "m-1" || got[1].Headers[broker.HeaderRedrive] == "" {
		t.Fatalf("stored messages %+v, want the original and the redrive with id m-1", got)
	}
	// The same letter cannot be redriven twice.
	if _, err := s.Redrive(ctx, id, "ops", b.Publisher()); !errors.Is(err, dlq.ErrNotParked) {
		t.Fatalf("second redrive = %v, want ErrNotParked", err)
	}
}
