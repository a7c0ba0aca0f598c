package outbox

import (
	"context"
	"testing"

	"github.com/idemkit/idem/internal/obs"
	"github.com/idemkit/idem/internal/obs/spantest"
	"github.com/idemkit/idem/internal/testdb"
	"github.com/idemkit/idem/store"
)

// Enqueue stores the context of its idem.outbox.enqueue span with the row;
// the relay publishes the event in an idem.relay.publish span that is a
// child of it, and the message's traceparent names the relay's span. A
// handler of a consumed message leaves its id in the causation header.
func TestTraceThroughOutbox(t *testing.T) {
	testdb.EachDriver(t, func(t *testing.T, e testdb.Driver) { traceThroughOutbox(t, e.D) })
}

func traceThroughOutbox[TTx any](t *testing.T, d store.Driver[TTx]) {
	rec := spantest.NewRecorder()
	o, err := New(d, Config{TracerProvider: rec})
	if err != nil {
		t.Fatal(err)
	}
	ctx, parent := rec.Tracer("test").Start(context.Background(), "request")
	ctx = obs.WithCausation(ctx, "msg-cause-1")
	err = store.InTx(ctx, d, func(tx TTx) error {
		_, err := o.EnqueueTx(ctx, tx, ev("k", 0), Event{Type: "t", Topic: "x", Headers: map[string]string{HeaderCausation: "own"}})
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	parent.End()
	// From a context without a span or a causing message: the enqueue
	// span is a root, no causation header.
	enqueueTx(t, d, o, ev("u", 0))

	pub := &fakePub{}
	cfg := fastRelay("trace")
	cfg.TracerProvider = rec
	r, err := NewRelay(d, pub, cfg)
	if err != nil {
		t.Fatal(err)
	}
	stop := startRelay(t, r)
	waitFor(t, "3 published", func() bool { return len(pub.snapshot()) >= 3 })
	if err := stop(); err != nil {
		t.Fatal(err)
	}

	spans := map[string][]*spantest.Span{}
	for _, s := range rec.Ended() {
		spans[s.Name()] = append(spans[s.Name()], s)
	}
	enq := spans["idem.outbox.enqueue"]
	if len(enq) != 2 {
		t.Fatalf("%d enqueue spans, want 2", len(enq))
	}
	if enq[0].Parent().SpanID() != parent.SpanContext().SpanID() || enq[0].SpanContext().TraceID() != parent.SpanContext().TraceID() {
		t.Fatalf("enqueue span is not a child of the caller's span")
	}
	pubs := map[string]*spantest.Span{}
	for _, s := range spans["idem.relay.publish"] {
		for _, kv := range s.Attributes() {
			if kv.Key == obs.AttrMessageID {
				pubs[kv.Value.AsString()] = s
			}
		}
	}
	for _, m := range pub.snapshot() {
		ps, ok := pubs[m.ID]
		if !ok {
			t.Fatalf("no publish span for %s", m.ID)
		}
		if m.Subject == "test.u" {
			if ps.Parent().SpanID() != enq[1].SpanContext().SpanID() || enq[1].Parent().IsValid() {
				t.Errorf("event enqueued without a span: publish parent %s, enqueue span %s (parent %s)",
					ps.Parent().SpanID(), enq[1].SpanContext().SpanID(), enq[1].Parent().SpanID())
			}
			if _, ok := m.Headers[HeaderCausation]; ok {
				t.Errorf("untraced event got a causation header")
			}
			continue
		}
		if ps.Parent().SpanID() != enq[0].SpanContext().SpanID() || ps.SpanContext().TraceID() != parent.SpanContext().TraceID() {
			t.Errorf("%s: publish span is not a child of the enqueue span", m.ID)
		}
		want := "00-" + ps.SpanContext().TraceID().String() + "-" + ps.SpanContext().SpanID().String() + "-01"
		if got := m.Headers["traceparent"]; got != want {
			t.Errorf("%s: traceparent %q, want %q", m.ID, got, want)
		}
	}
	for _, m := range pub.snapshot() {
		switch m.Subject {
		case "test.k":
			mustEqual(t, "causation", m.Headers[HeaderCausation], "msg-cause-1")
		case "x":
			mustEqual(t, "caller's causation", m.Headers[HeaderCausation], "own")
		}
	}
}
