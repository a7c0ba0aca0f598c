package idemamqp

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/broker"
)

// frames records the acks and nacks a settler sends, as the broker would
// see them; failAt makes the ack of that tag fail.
type frames struct {
	mu     sync.Mutex
	sent   []string
	failAt uint64
}

func (f *frames) Ack(tag uint64, multiple bool) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.sent = append(f.sent, fmt.Sprintf("ack %d multiple=%v", tag, multiple))
	if tag == f.failAt {
		return errors.New("channel closed")
	}
	return nil
}

func (f *frames) Nack(tag uint64, multiple, requeue bool) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.sent = append(f.sent, fmt.Sprintf("nack %d requeue=%v", tag, requeue))
	return nil
}

func (f *frames) take() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	out := f.sent
	f.sent = nil
	return out
}

// testDeliveries hands out deliveries with tags 1..n on one fake channel.
func testDeliveries(t *testing.T, n int) (*Subscriber, *frames, []broker.Delivery) {
	t.Helper()
	f := &frames{}
	s := &Subscriber{cfg: SubscriberConfig{AckWait: time.Hour}, attempts: map[string]attemptCount{}}
	st := newSettler(f)
	var ds []broker.Delivery
	for i := 1; i <= n; i++ {
		ds = append(ds, handOut(t, s, st, uint64(i)))
	}
	return s, f, ds
}

// handOut makes the delivery of tag on st's channel, as Fetch does.
func handOut(t *testing.T, s *Subscriber, st *settler, tag uint64) *delivery {
	t.Helper()
	st.track(tag)
	id := fmt.Sprintf("m-%d", tag)
	key := countKey(id, "", idem.Message{})
	s.attempt(key, false, -1, time.Now())
	d := &delivery{s: s, st: st, tag: tag, msg: idem.Message{ID: id}, count: key}
	d.timer = time.AfterFunc(time.Hour, d.expire)
	t.Cleanup(func() { d.timer.Stop() })
	return d
}

func pick(ds []broker.Delivery, tags ...int) []broker.Delivery {
	var out []broker.Delivery
	for _, t := range tags {
		out = append(out, ds[t-1])
	}
	return out
}

func TestAckBatchFrames(t *testing.T) {
	ctx := context.Background()
	for _, tc := range []struct {
		name    string
		settled []int // settled one by one first (acked)
		batch   []int
		want    []string
	}{
		{"every unsettled delivery: one multiple ack", nil, []int{1, 2, 3, 4, 5},
			[]string{"ack 5 multiple=true"}},
		{"out of order: still one frame", nil, []int{3, 1, 5, 2, 4},
			[]string{"ack 5 multiple=true"}},
		{"a prefix: one frame, the rest stays unsettled", nil, []int{1, 2, 3},
			[]string{"ack 3 multiple=true"}},
		{"a gap: the run below it in one frame, the rest one by one", nil, []int{1, 2, 4, 5},
			[]string{"ack 2 multiple=true", "ack 4 multiple=false", "ack 5 multiple=false"}},
		{"an unsettled delivery below: one by one", nil, []int{2, 3},
			[]string{"ack 2 multiple=false", "ack 3 multiple=false"}},
		{"the one below already settled: one frame", []int{1}, []int{2, 3},
			[]string{"ack 3 multiple=true"}},
		{"a single delivery: a plain ack", nil, []int{1},
			[]string{"ack 1 multiple=false"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s, f, ds := testDeliveries(t, 5)
			for _, i := range tc.settled {
				if err := ds[i-1].Ack(ctx); err != nil {
					t.Fatal(err)
				}
			}
			f.take()
			if err := s.AckBatch(ctx, pick(ds, tc.batch...)); err != nil {
				t.Fatalf("AckBatch: %v", err)
			}
			if got := f.take(); !slices.Equal(got, tc.want) {
				t.Fatalf("frames %q, want %q", got, tc.want)
			}
			// Every delivery of the batch is settled: acking again
			// sends nothing.
			for _, d := range pick(ds, tc.batch...) {
				if err := d.Ack(ctx); err != nil {
					t.Fatal(err)
				}
			}
			if got := f.take(); len(got) != 0 {
				t.Fatalf("a second ack sent %q", got)
			}
		})
	}
}

// A delivery nacked (or expired) while it was left out of a batch is never
// covered by the batch's multiple ack, and one nacked with a delay stays
// unsettled, so it bounds the run.
func TestAckBatchLeavesOthersAlone(t *testing.T) {
	ctx := context.Background()
	s, f, ds := testDeliveries(t, 6)
	if err := ds[2].Nak(ctx, time.Hour); err != nil { // tag 3 waits an hour
		t.Fatal(err)
	}
	if err := ds[4].Term(ctx); err != nil { // tag 5 rejected now
		t.Fatal(err)
	}
	f.take()
	if err := s.AckBatch(ctx, pick(ds, 1, 2, 4, 6)); err != nil {
		t.Fatal(err)
	}
	want := []string{"ack 2 multiple=true", "ack 4 multiple=false", "ack 6 multiple=false"}
	if got := f.take(); !slices.Equal(got, want) {
		t.Fatalf("frames %q, want %q", got, want)
	}
	// Tag 3 is the only one left: a later batch of it is one plain ack.
	if err := s.AckBatch(ctx, pick(ds, 3)); err != nil {
		t.Fatal(err)
	}
	if got := f.take(); !slices.Equal(got, []string{"ack 3 multiple=false"}) {
		t.Fatalf("frames %q", got)
	}
}

func TestAckBatchErrors(t *testing.T) {
	ctx := context.Background()
	s, f, ds := testDeliveries(t, 5)
	// Tag 4 was requeued by its ack wait.
	ds[3].(*delivery).expire()
	f.failAt = 2
	err := s.AckBatch(ctx, pick(ds, 1, 2, 4, 5))
	var be *broker.BatchAckError
	if !errors.As(err, &be) || len(be.Errs) != 4 {
		t.Fatalf("AckBatch: %v, want a BatchAckError of 4", err)
	}
	// The failed multiple ack (tags 1-2) fails both of its deliveries;
	// tag 4 had expired; tag 5 was acked alone.
	for i, want := range []bool{false, false, false, true} {
		if got := broker.BatchAcked(err, i); got != want {
			t.Errorf("entry %d acked = %v, want %v (%v)", i, got, want, be.Errs[i])
		}
	}
	if !errors.Is(be.Errs[0], broker.ErrUnavailable) || !errors.Is(be.Errs[1], broker.ErrUnavailable) {
		t.Errorf("failed acks not ErrUnavailable: %v", be.Errs[:2])
	}
	if !errors.Is(be.Errs[2], ErrAckWaitExpired) {
		t.Errorf("expired entry: %v, want ErrAckWaitExpired", be.Errs[2])
	}
}

// Acks of one channel sent from many goroutines at once (AckBatch, Ack,
// Nak, the ack wait's requeue) never settle a tag twice nor cover with a
// multiple ack a tag another frame settled after it.
func TestAckBatchConcurrentSettlements(t *testing.T) {
	ctx := context.Background()
	const n = 400
	s, f, ds := testDeliveries(t, n)
	var wg sync.WaitGroup
	for lo := 0; lo < n; lo += 20 {
		wg.Go(func() {
			var batch []broker.Delivery
			for i := lo; i < lo+20; i++ {
				switch i % 7 {
				case 3:
					wg.Go(func() { _ = ds[i].Nak(ctx, 0) })
				case 5:
					wg.Go(func() { ds[i].(*delivery).expire() })
				default:
					batch = append(batch, ds[i])
				}
			}
			if err := s.AckBatch(ctx, batch); err != nil {
				t.Error(err)
			}
		})
	}
	wg.Wait()
	// Replay the frames as the broker applies them, in the order sent.
	open := map[uint64]bool{}
	for i := 1; i <= n; i++ {
		open[uint64(i)] = true
	}
	for _, fr := range f.take() {
		var (
			kind     string
			tag      uint64
			flag     string
			multiple bool
		)
		if _, err := fmt.Sscanf(fr, "%s %d %s", &kind, &tag, &flag); err != nil {
			t.Fatalf("frame %q: %v", fr, err)
		}
		multiple = flag == "multiple=true"
		if !open[tag] {
			t.Fatalf("frame %q settles tag %d, which is not outstanding", fr, tag)
		}
		if multiple {
			for t2 := range open {
				if t2 <= tag {
					delete(open, t2)
				}
			}
			continue
		}
		delete(open, tag)
	}
	if len(open) != 0 {
		t.Fatalf("%d tags never settled", len(open))
	}
}

// After Resume, a delivery of the cancelled consumer can still be on its
// way (pause.go's follow) while Fetch hands out a later one: a multiple ack
// must not cover the tag not handed out yet, which would ack a message
// nobody has processed and make its own ack close the channel.
func TestAckBatchStopsBelowATagNotHandedOut(t *testing.T) {
	ctx := context.Background()
	f := &frames{}
	s := &Subscriber{cfg: SubscriberConfig{AckWait: time.Hour}, attempts: map[string]attemptCount{}}
	st := newSettler(f)
	var ds []broker.Delivery
	for _, tag := range []uint64{1, 2, 3, 4, 6} { // 5 is still on its way
		ds = append(ds, handOut(t, s, st, tag))
	}
	if err := s.AckBatch(ctx, ds); err != nil {
		t.Fatal(err)
	}
	want := []string{"ack 4 multiple=true", "ack 6 multiple=false"}
	if got := f.take(); !slices.Equal(got, want) {
		t.Fatalf("frames %q, want %q", got, want)
	}
	five := handOut(t, s, st, 5)
	seven, eight := handOut(t, s, st, 7), handOut(t, s, st, 8)
	if err := s.AckBatch(ctx, []broker.Delivery{five, seven, eight}); err != nil {
		t.Fatal(err)
	}
	if got := f.take(); !slices.Equal(got, []string{"ack 8 multiple=true"}) {
		t.Fatalf("frames %q, want one multiple ack once 5 is handed out", got)
	}
}

// otherDelivery is a delivery this package did not make.
type otherDelivery struct {
	broker.Delivery
	acks int
}

func (o *otherDelivery) Message() idem.Message         { return idem.Message{ID: "other"} }
func (o *otherDelivery) Ack(ctx context.Context) error { o.acks++; return nil }

func TestAckBatchMixedDeliveries(t *testing.T) {
	ctx := context.Background()
	s, f, ds := testDeliveries(t, 3)
	// A second channel of the same subscriber (after a reconnect).
	g := &frames{}
	st2 := newSettler(g)
	old1, old2 := handOut(t, s, st2, 1), handOut(t, s, st2, 2)
	other := &otherDelivery{}
	batch := []broker.Delivery{ds[0], old1, other, ds[1], old2, ds[2]}
	if err := s.AckBatch(ctx, batch); err != nil {
		t.Fatal(err)
	}
	if got := f.take(); !slices.Equal(got, []string{"ack 3 multiple=true"}) {
		t.Fatalf("first channel's frames %q", got)
	}
	if got := g.take(); !slices.Equal(got, []string{"ack 2 multiple=true"}) {
		t.Fatalf("second channel's frames %q", got)
	}
	if other.acks != 1 {
		t.Fatalf("the foreign delivery was acked %d times, want 1", other.acks)
	}
	s.mu.Lock()
	n := len(s.attempts)
	s.mu.Unlock()
	if n != 0 {
		t.Fatalf("%d attempt counts left after the acks, want 0 (as Ack drops them)", n)
	}
}

func TestAckBatchListedTwice(t *testing.T) {
	ctx := context.Background()
	s, f, ds := testDeliveries(t, 2)
	f.failAt = 2
	err := s.AckBatch(ctx, []broker.Delivery{ds[0], ds[1], ds[0], ds[1]})
	if got := f.take(); !slices.Equal(got, []string{"ack 2 multiple=true"}) {
		t.Fatalf("frames %q: a delivery listed twice must be acked once", got)
	}
	for i := range 4 {
		if broker.BatchAcked(err, i) {
			t.Errorf("entry %d reported acked after the failed ack (%v)", i, err)
		}
	}
}

// The subscriber's attempt counts of messages it never settles (another
// subscriber of the queue acked them, or a connection dropped) do not grow
// for ever: past sweepAbove counts, those not seen for forgetAttemptsAfter
// are dropped, at most once per sweepEvery; recent ones are kept.
func TestAttemptCountsAreSwept(t *testing.T) {
	s := &Subscriber{cfg: SubscriberConfig{AckWait: time.Second}, attempts: map[string]attemptCount{}}
	t0 := time.Now()
	for i := range sweepAbove + 10 {
		if n := s.attempt(fmt.Sprintf("old-%d", i), false, -1, t0); n != 1 {
			t.Fatalf("first delivery: attempt %d, want 1", n)
		}
	}
	if n := s.attempt("old-0", false, -1, t0.Add(time.Second)); n != 2 {
		t.Fatalf("second delivery: attempt %d, want 2", n)
	}
	later := t0.Add(forgetAttemptsAfter + time.Minute)
	if n := s.attempt("recent", false, -1, later.Add(-time.Minute)); n != 1 {
		t.Fatalf("attempt %d, want 1", n)
	}
	s.attempt("new", false, -1, later) // sweeps
	if got := len(s.attempts); got != 2 {
		t.Fatalf("%d counts kept after the sweep, want 2 (recent, new)", got)
	}
	if n := s.attempt("old-0", true, -1, later); n != 2 {
		t.Errorf("a forgotten message redelivered: attempt %d, want 2 (the redelivered flag)", n)
	}
	if n := s.attempt("recent", false, 4, later); n != 5 {
		t.Errorf("x-delivery-count 4: attempt %d, want 5", n)
	}

	// A count whose delivery a Nak holds (for longer than the staleness)
	// is kept until the delay ends: the message still reaches MaxAttempts.
	s.holdAttempts("recent", later.Add(3*forgetAttemptsAfter))
	for i := range sweepAbove + 1 { // past sweepAbove again: one of them sweeps
		s.attempt(fmt.Sprintf("busy-%d", i), false, -1, later.Add(2*forgetAttemptsAfter))
	}
	if _, ok := s.attempts["new"]; ok {
		t.Fatal("no sweep: the count of new, stale by now, is still there")
	}
	if n := s.attempt("recent", true, -1, later.Add(3*forgetAttemptsAfter)); n != 6 {
		t.Errorf("after a long Nak: attempt %d, want 6 (its count kept)", n)
	}
}

// TestCountKeyOfMessagesWithoutID: a message without an id is counted by
// its routing key, key, publisher's headers and body, not by the headers
// the broker adds between deliveries; a message with an id by the id.
func TestCountKeyOfMessagesWithoutID(t *testing.T) {
	msg := func(h map[string]string) idem.Message {
		return idem.Message{Payload: []byte(`{}`), Headers: h}
	}
	a := countKey("", "orders", msg(map[string]string{"tenant": "a"}))
	if b := countKey("", "orders", msg(map[string]string{"tenant": "b"})); a == b {
		t.Fatal("two messages that differ in a publisher's header share a count")
	}
	if again := countKey("", "orders", msg(map[string]string{"tenant": "a", "x-death": "[…]", "x-first-death-queue": "q"})); again != a {
		t.Fatal("the broker's x- headers changed a message's count")
	}
	if c := countKey("", "refunds", msg(map[string]string{"tenant": "a"})); c == a {
		t.Fatal("two routing keys share a count")
	}
	// Parts never run together: a header "t\x00x" with an empty value and
	// an empty body is not the header "t" of value "x" with a NUL body
	// (separated by NULs, both were the same bytes).
	glued := countKey("", "orders", idem.Message{Headers: map[string]string{"t\x00x": ""}})
	if apart := countKey("", "orders", idem.Message{Headers: map[string]string{"t": "x"}, Payload: []byte{0}}); glued == apart {
		t.Fatal("two messages whose parts differ only in where one ends share a count")
	}
	if k := countKey("m-1", "orders", msg(nil)); k != "m-1" {
		t.Fatalf("count key of id m-1 = %q", k)
	}
}
