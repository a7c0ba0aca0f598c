package consumer_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"go.opentelemetry.io/otel/trace"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/broker/memory"
	"github.com/idemkit/idem/consumer"
	"github.com/idemkit/idem/internal/obs"
	"github.com/idemkit/idem/internal/obs/spantest"
	"github.com/idemkit/idem/internal/testdb"
)

// One idem.consume span per delivery, a child of the traceparent in the
// message's headers, with the decision taken: processed, duplicate,
// retry, dead_lettered. The handler runs under its delivery's span (also
// inside a batch) with the message id as causation.
func TestConsumeSpans(t *testing.T) {
	for _, batch := range []int{1, 8} {
		t.Run(fmt.Sprintf("batch-%d", batch), func(t *testing.T) { consumeSpans(t, batch) })
	}
}

func consumeSpans(t *testing.T, batch int) {
	d := testdb.SQLite(t)
	rec := spantest.NewRecorder()
	b, err := memory.New(memory.Config{AckWait: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { b.Close() }) // after the consumer stops (cleanups run last-registered first)
	sub, err := b.Subscribe("orders", "billing")
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	inHandler := map[string]trace.SpanContext{}
	causation := map[string]string{}
	failedOnce := false
	c, err := consumer.New(newInbox(t, d), sub, consumer.Config[*sql.Tx]{
		Name: "billing", BatchSize: batch, FetchWait: 50 * time.Millisecond, MaxAttempts: 3, TracerProvider: rec,
		Backoff: consumer.Backoff{Base: time.Millisecond, Max: 2 * time.Millisecond},
		Handler: func(ctx context.Context, tx *sql.Tx, msg idem.Message) error {
			mu.Lock()
			defer mu.Unlock()
			inHandler[msg.ID+fmt.Sprint(msg.Attempt)] = trace.SpanContextFromContext(ctx)
			causation[msg.ID] = obs.Causation(ctx)
			switch msg.ID {
			case "poison":
				return idem.Permanent(errors.New("cannot bill"))
			case "flaky":
				if !failedOnce {
					failedOnce = true
					return errors.New("transient")
				}
			}
			return nil
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	parents := map[string]string{}
	pub := b.Publisher()
	for i, id := range []string{"m1", "m1", "poison", "flaky"} {
		sp := fmt.Sprintf("%016x", 0xa0+i)
		tpHeader := "00-4bf92f3577b34da6a3ce929d0e0e4736-" + sp + "-01"
		if id != "m1" || i == 0 {
			parents[id] = sp
		}
		if err := pub.Publish(context.Background(), idem.Message{ID: id, Subject: "orders", Payload: []byte(`{}`),
			Headers: map[string]string{"traceparent": tpHeader}}); err != nil {
			t.Fatal(err)
		}
	}
	start(t, c)
	want := map[string]int{"processed": 2, "duplicate": 1, "retry": 1, "dead_lettered": 1}
	byDecision := func() map[string]int {
		n := map[string]int{}
		for _, s := range rec.Ended() {
			if s.Name() == "idem.consume" {
				for _, kv := range s.Attributes() {
					if kv.Key == "idem.decision" {
						n[kv.Value.AsString()]++
					}
				}
			}
		}
		return n
	}
	waitFor(t, "five consume spans", func() bool { n := byDecision(); return n["processed"] == 2 && n["dead_lettered"] == 1 })
	if got := byDecision(); fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("decisions %v, want %v", got, want)
	}
	mu.Lock()
	defer mu.Unlock()
	for _, s := range rec.Ended() {
		if s.Name() != "idem.consume" {
			continue
		}
		attrs := map[string]string{}
		for _, kv := range s.Attributes() {
			attrs[string(kv.Key)] = kv.Value.Emit()
		}
		id := attrs["idem.message_id"]
		if attrs["idem.consumer"] != "billing" || s.SpanKind() != trace.SpanKindConsumer {
			t.Errorf("%s: attributes %v kind %v", id, attrs, s.SpanKind())
		}
		if s.SpanContext().TraceID().String() != "4bf92f3577b34da6a3ce929d0e0e4736" {
			t.Errorf("%s: consume span in trace %s, not the producer's", id, s.SpanContext().TraceID())
		}
		if attrs["idem.decision"] != "duplicate" && s.Parent().SpanID().String() != parents[id] {
			t.Errorf("%s: parent %s, want the injected %s", id, s.Parent().SpanID(), parents[id])
		}
		if attrs["idem.decision"] == "duplicate" {
			continue // the handler did not run
		}
		if h := inHandler[id+attrs["idem.attempt"]]; h.SpanID() != s.SpanContext().SpanID() {
			t.Errorf("%s attempt %s: handler ran under span %s, not its delivery's %s", id, attrs["idem.attempt"], h.SpanID(), s.SpanContext().SpanID())
		}
	}
	for id, c := range causation {
		if c != id {
			t.Errorf("handler of %s saw causation %q", id, c)
		}
	}
}
