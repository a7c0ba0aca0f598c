// Package brokertest is the conformance suite every broker adapter passes:
// publish and consume, redelivery of unacknowledged messages, Nak with a
// delay, Term, attempt counting, message id, key and headers round trips,
// and ordering within a key.
//
// An adapter's test calls [Run] with a function that builds a fresh
// [Harness] per subtest (a fresh subject or topic, so subtests can run in
// parallel and leave nothing behind):
//
//	func TestConformance(t *testing.T) {
//		brokertest.Run(t, func(t *testing.T) brokertest.Harness { … })
//	}
package brokertest

import (
	"context"
	"fmt"
	"maps"
	"strconv"
	"testing"
	"time"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/broker"
)

// Harness is what the suite needs from one adapter for one subtest.
type Harness struct {
	// Publisher publishes to the subject returned by Subject. The suite
	// closes it at the end of the subtest unless KeepPublisher is set.
	Publisher broker.Publisher
	// KeepPublisher stops the suite from closing Publisher (when it is
	// shared between subtests).
	KeepPublisher bool
	// Subject is a fresh subject / topic / queue name for this subtest,
	// already created if the broker needs that (stream, topic, queue).
	Subject string
	// Subscribe returns a new subscriber on Subject for the named
	// subscription (durable consumer, consumer group, queue). Subscribers
	// of the same name share one subscription. The suite closes it.
	// It must be callable before anything is published, and a subscription
	// must see messages published after its first Subscribe.
	Subscribe func(t *testing.T, name string) broker.Subscriber
	// AckWait is the ack wait the subscribers were configured with: an
	// unacknowledged delivery comes back after about that long. Keep it
	// short (≤ 1s) so the suite is fast.
	AckWait time.Duration
	// DedupByID reports that the broker drops a second publish of the same
	// message id (JetStream's duplicate window); the suite then checks it.
	DedupByID bool
}

// Run runs the conformance suite. Every subtest calls newHarness once and
// runs in parallel with the others.
func Run(t *testing.T, newHarness func(t *testing.T) Harness) {
	tests := []struct {
		name string
		fn   func(*testing.T, Harness)
	}{
		{"PublishConsume", testPublishConsume},
		{"RoundTrip", testRoundTrip},
		{"RedeliverWithoutAck", testRedeliverWithoutAck},
		{"RedeliverAfterClose", testRedeliverAfterClose},
		{"NakDelay", testNakDelay},
		{"AttemptIncrements", testAttemptIncrements},
		{"TermStopsRedelivery", testTerm},
		{"OrderWithinKey", testOrderWithinKey},
		{"IndependentSubscriptions", testIndependentSubscriptions},
		{"DedupByID", testDedupByID},
		{"AckBatch", testAckBatch},
		{"FetchReturnsWhatIsAvailable", testFetchReturnsWhatIsAvailable},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			h := newHarness(t)
			if !h.KeepPublisher {
				t.Cleanup(func() { _ = h.Publisher.Close() })
			}
			if h.AckWait <= 0 {
				t.Fatal("brokertest: Harness.AckWait must be set")
			}
			tc.fn(t, h)
		})
	}
}

func ctxFor(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	t.Cleanup(cancel)
	return ctx
}

func subscribe(t *testing.T, h Harness, name string) broker.Subscriber {
	t.Helper()
	s := h.Subscribe(t, name)
	t.Cleanup(func() { _ = s.Close() })
	return s
}

func msg(h Harness, id, key string, payload string) idem.Message {
	return idem.Message{ID: id, Subject: h.Subject, Key: key, Payload: []byte(payload)}
}

// collect fetches until n deliveries arrived or within passed.
func collect(t *testing.T, s broker.Subscriber, n int, within time.Duration) []broker.Delivery {
	t.Helper()
	ctx := ctxFor(t)
	var out []broker.Delivery
	deadline := time.Now().Add(within)
	for len(out) < n {
		left := time.Until(deadline)
		if left <= 0 {
			t.Fatalf("got %d of %d deliveries within %v", len(out), n, within)
		}
		ds, err := s.Fetch(ctx, n-len(out), min(left, 500*time.Millisecond))
		if err != nil {
			t.Fatalf("Fetch: %v", err)
		}
		out = append(out, ds...)
	}
	return out
}

// expectNone checks that nothing is delivered during wait.
func expectNone(t *testing.T, s broker.Subscriber, wait time.Duration) {
	t.Helper()
	ctx := ctxFor(t)
	deadline := time.Now().Add(wait)
	for left := time.Until(deadline); left > 0; left = time.Until(deadline) {
		ds, err := s.Fetch(ctx, 10, left)
		if err != nil {
			t.Fatalf("Fetch: %v", err)
		}
		for _, d := range ds {
			m := d.Message()
			t.Errorf("unexpected delivery of %q attempt %d", m.ID, m.Attempt)
			_ = d.Ack(ctx)
		}
	}
}

func publish(t *testing.T, h Harness, msgs ...idem.Message) {
	t.Helper()
	if err := h.Publisher.Publish(ctxFor(t), msgs...); err != nil {
		t.Fatalf("Publish: %v", err)
	}
}

func ack(t *testing.T, ds ...broker.Delivery) {
	t.Helper()
	for _, d := range ds {
		if err := d.Ack(ctxFor(t)); err != nil {
			t.Fatalf("Ack %q: %v", d.Message().ID, err)
		}
	}
}

func testPublishConsume(t *testing.T, h Harness) {
	s := subscribe(t, h, "c")
	const n = 25
	var msgs []idem.Message
	for i := range n {
		msgs = append(msgs, msg(h, fmt.Sprintf("pc-%d", i), "", fmt.Sprintf("payload %d", i)))
	}
	publish(t, h, msgs...)
	ds := collect(t, s, n, 10*time.Second)
	seen := map[string]string{}
	for _, d := range ds {
		m := d.Message()
		if m.Attempt != 1 {
			t.Errorf("%q: attempt %d, want 1", m.ID, m.Attempt)
		}
		if m.Subject != h.Subject {
			t.Errorf("%q: subject %q, want %q", m.ID, m.Subject, h.Subject)
		}
		if m.Position == "" {
			t.Errorf("%q: empty position", m.ID)
		}
		if _, dup := seen[m.ID]; dup {
			t.Errorf("%q delivered twice before any ack wait", m.ID)
		}
		seen[m.ID] = string(m.Payload)
	}
	for i := range n {
		if got, want := seen[fmt.Sprintf("pc-%d", i)], fmt.Sprintf("payload %d", i); got != want {
			t.Errorf("pc-%d: payload %q, want %q", i, got, want)
		}
	}
	ack(t, ds...)
	expectNone(t, s, h.AckWait*2)
}

func testRoundTrip(t *testing.T, h Harness) {
	s := subscribe(t, h, "c")
	at := time.Date(2025, 3, 1, 12, 30, 15, 123456000, time.UTC)
	want := idem.Message{
		ID:      "source-a/0190f2c4-7d5e-7b3a-9c1d-2e4f6a8b0c1d",
		Subject: h.Subject,
		Key:     "order-42",
		Headers: map[string]string{"ce-type": "order.confirmed", "ce-source": "source-a", "traceparent": "00-abc-def-01"},
		Payload: []byte(`{"order":42,"bytes":"\u0000\u00ff"}`),
		Time:    at,
	}
	empty := idem.Message{ID: "no-extras", Subject: h.Subject}
	publish(t, h, want, empty)
	ds := collect(t, s, 2, 10*time.Second)
	byID := map[string]idem.Message{}
	for _, d := range ds {
		byID[d.Message().ID] = d.Message()
	}
	got, ok := byID[want.ID]
	if !ok {
		t.Fatalf("message id did not round trip: got %v", slices(byID))
	}
	if got.Key != want.Key {
		t.Errorf("key %q, want %q", got.Key, want.Key)
	}
	if string(got.Payload) != string(want.Payload) {
		t.Errorf("payload %q, want %q", got.Payload, want.Payload)
	}
	for k, v := range want.Headers {
		if got.Headers[k] != v {
			t.Errorf("header %q = %q, want %q (headers %v)", k, got.Headers[k], v, got.Headers)
		}
	}
	if !got.Time.Equal(want.Time) {
		t.Errorf("time %v, want %v", got.Time, want.Time)
	}
	if e, ok := byID[empty.ID]; !ok {
		t.Errorf("message without key, headers and payload lost")
	} else if e.Key != "" || len(e.Payload) != 0 {
		t.Errorf("empty message came back with key %q payload %q", e.Key, e.Payload)
	}
	ack(t, ds...)
}

func slices(m map[string]idem.Message) []string {
	var out []string
	for k := range maps.Keys(m) {
		out = append(out, k)
	}
	return out
}

func testRedeliverWithoutAck(t *testing.T, h Harness) {
	s := subscribe(t, h, "c")
	publish(t, h, msg(h, "r-1", "k", "x"))
	first := collect(t, s, 1, 10*time.Second)[0]
	pos := first.Message().Position
	// No Ack: the broker must deliver it again after the ack wait.
	again := collect(t, s, 1, h.AckWait*4+5*time.Second)[0]
	m := again.Message()
	if m.ID != "r-1" || m.Attempt != 2 {
		t.Fatalf("redelivered %q attempt %d, want r-1 attempt 2", m.ID, m.Attempt)
	}
	if m.Position == "" {
		t.Errorf("redelivery has empty position (first was %q)", pos)
	}
	ack(t, again)
	expectNone(t, s, h.AckWait*2)
}

// testAckBatch, for subscribers that are a broker.BatchAcker: a batch
// acked with one AckBatch is never redelivered, while a delivery left out
// of it is.
func testAckBatch(t *testing.T, h Harness) {
	s := subscribe(t, h, "c")
	ba, ok := s.(broker.BatchAcker)
	if !ok {
		t.Skipf("%T does not implement broker.BatchAcker", s)
	}
	const n = 20
	var msgs []idem.Message
	for i := range n {
		msgs = append(msgs, msg(h, fmt.Sprintf("b-%02d", i), "", "x"))
	}
	publish(t, h, msgs...)
	ds := collect(t, s, n, 10*time.Second)
	var left broker.Delivery
	acked := make([]broker.Delivery, 0, n-1)
	for _, d := range ds {
		if d.Message().ID == "b-07" {
			left = d
			continue
		}
		acked = append(acked, d)
	}
	if left == nil {
		t.Fatal("b-07 was not delivered")
	}
	if err := ba.AckBatch(ctxFor(t), acked); err != nil {
		t.Fatalf("AckBatch: %v", err)
	}
	again := collect(t, s, 1, h.AckWait*4+5*time.Second)[0]
	if m := again.Message(); m.ID != "b-07" || m.Attempt != 2 {
		t.Fatalf("redelivered %q attempt %d, want only b-07 (left out of the batch) at attempt 2", m.ID, m.Attempt)
	}
	ack(t, again)
	expectNone(t, s, h.AckWait*2)
}

// testFetchReturnsWhatIsAvailable: Fetch returns as soon as a delivery is
// available, with fewer than max, instead of waiting for max deliveries
// until maxWait runs out (the Subscriber contract). A batch consumer at a
// light load would otherwise hold every message for its FetchWait.
func testFetchReturnsWhatIsAvailable(t *testing.T, h Harness) {
	s := subscribe(t, h, "c")
	// The subscription is live once its first message arrived (a Kafka
	// group joins in the background).
	publish(t, h, msg(h, "w-1", "", "x"))
	ack(t, collect(t, s, 1, 20*time.Second)...)
	publish(t, h, msg(h, "w-2", "", "x"), msg(h, "w-3", "", "x"))
	// Available messages come back in milliseconds; a Fetch that waits
	// for max deliveries comes back after most of maxWait. The bound
	// between them is generous for a loaded machine.
	const maxWait, bound = 30 * time.Second, 10 * time.Second
	ctx := ctxFor(t)
	start := time.Now()
	var got []broker.Delivery
	for len(got) < 2 {
		ds, err := s.Fetch(ctx, 100, maxWait)
		if err != nil {
			t.Fatalf("Fetch: %v", err)
		}
		got = append(got, ds...)
		if took := time.Since(start); took > bound {
			t.Fatalf("Fetch(max 100, maxWait %v) returned %d deliveries (2 messages available) after %v: it waited for max deliveries, not for the first", maxWait, len(got), took.Round(time.Millisecond))
		}
	}
	ack(t, got...)
	ids := map[string]bool{}
	for _, d := range got {
		ids[d.Message().ID] = true
	}
	if len(got) != 2 || !ids["w-2"] || !ids["w-3"] {
		var seen []string
		for _, d := range got {
			seen = append(seen, d.Message().ID)
		}
		t.Errorf("delivered %v, want w-2 and w-3 once each", seen)
	}
}

func testRedeliverAfterClose(t *testing.T, h Harness) {
	s1 := h.Subscribe(t, "c")
	publish(t, h, msg(h, "rc-1", "", "x"), msg(h, "rc-2", "", "y"))
	ds := collect(t, s1, 2, 10*time.Second)
	for _, d := range ds {
		if d.Message().ID == "rc-1" {
			ack(t, d)
		}
	}
	if err := s1.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	// A new subscriber of the same subscription gets the unacknowledged
	// message, and only that one.
	s2 := subscribe(t, h, "c")
	d := collect(t, s2, 1, h.AckWait*4+5*time.Second)[0]
	if id := d.Message().ID; id != "rc-2" {
		t.Fatalf("after close got %q, want rc-2", id)
	}
	ack(t, d)
	expectNone(t, s2, h.AckWait*2)
}

func testNakDelay(t *testing.T, h Harness) {
	s := subscribe(t, h, "c")
	publish(t, h, msg(h, "n-1", "", "x"))
	d := collect(t, s, 1, 10*time.Second)[0]
	delay := h.AckWait / 2
	naked := time.Now()
	if err := d.Nak(ctxFor(t), delay); err != nil {
		t.Fatalf("Nak: %v", err)
	}
	again := collect(t, s, 1, h.AckWait*4+5*time.Second)[0]
	// A lower bound only: a slow machine may redeliver later, never earlier.
	if el := time.Since(naked); el < delay*9/10 {
		t.Errorf("redelivered %v after Nak(%v)", el, delay)
	}
	if m := again.Message(); m.ID != "n-1" || m.Attempt != 2 {
		t.Fatalf("got %q attempt %d, want n-1 attempt 2", m.ID, m.Attempt)
	}
	ack(t, again)
}

func testAttemptIncrements(t *testing.T, h Harness) {
	s := subscribe(t, h, "c")
	publish(t, h, msg(h, "a-1", "", "x"))
	for want := 1; want <= 3; want++ {
		d := collect(t, s, 1, h.AckWait*4+5*time.Second)[0]
		m := d.Message()
		if m.ID != "a-1" || m.Attempt != want {
			t.Fatalf("got %q attempt %d, want a-1 attempt %d", m.ID, m.Attempt, want)
		}
		if want < 3 {
			if err := d.Nak(ctxFor(t), 0); err != nil {
				t.Fatalf("Nak: %v", err)
			}
		} else {
			ack(t, d)
		}
	}
}

func testTerm(t *testing.T, h Harness) {
	s := subscribe(t, h, "c")
	publish(t, h, msg(h, "t-1", "", "x"), msg(h, "t-2", "", "y"))
	for _, d := range collect(t, s, 2, 10*time.Second) {
		var err error
		if d.Message().ID == "t-1" {
			err = d.Term(ctxFor(t))
		} else {
			err = d.Ack(ctxFor(t))
		}
		if err != nil {
			t.Fatalf("settle %q: %v", d.Message().ID, err)
		}
	}
	expectNone(t, s, h.AckWait*2)
}

func testOrderWithinKey(t *testing.T, h Harness) {
	s := subscribe(t, h, "c")
	const keys, per = 4, 15
	var msgs []idem.Message
	for i := range per {
		for k := range keys {
			msgs = append(msgs, msg(h, fmt.Sprintf("k%d-%d", k, i), fmt.Sprintf("key-%d", k), strconv.Itoa(i)))
		}
	}
	// Publish in a few calls, as a relay would in batches.
	for i := 0; i < len(msgs); i += 16 {
		publish(t, h, msgs[i:min(i+16, len(msgs))]...)
	}
	ds := collect(t, s, keys*per, 15*time.Second)
	next := map[string]int{}
	for _, d := range ds {
		m := d.Message()
		want := next[m.Key]
		if string(m.Payload) != strconv.Itoa(want) {
			t.Fatalf("key %q: got seq %s, want %d", m.Key, m.Payload, want)
		}
		next[m.Key] = want + 1
	}
	ack(t, ds...)
}

func testIndependentSubscriptions(t *testing.T, h Harness) {
	a := subscribe(t, h, "a")
	b := subscribe(t, h, "b")
	publish(t, h, msg(h, "i-1", "", "x"), msg(h, "i-2", "", "y"))
	for _, s := range []broker.Subscriber{a, b} {
		ds := collect(t, s, 2, 10*time.Second)
		ack(t, ds...)
	}
}

func testDedupByID(t *testing.T, h Harness) {
	if !h.DedupByID {
		t.Skip("broker does not dedup publishes by message id")
	}
	s := subscribe(t, h, "c")
	publish(t, h, msg(h, "d-1", "", "x"))
	publish(t, h, msg(h, "d-1", "", "x"), msg(h, "d-2", "", "y"))
	ds := collect(t, s, 2, 10*time.Second)
	if a, b := ds[0].Message().ID, ds[1].Message().ID; a != "d-1" || b != "d-2" {
		t.Fatalf("got %q, %q; want d-1, d-2", a, b)
	}
	ack(t, ds...)
	expectNone(t, s, h.AckWait)
}
