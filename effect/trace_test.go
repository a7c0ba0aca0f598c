package effect_test

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"github.com/idemkit/idem/effect"
	"github.com/idemkit/idem/idemhttp"
	"github.com/idemkit/idem/internal/obs/spantest"
	"github.com/idemkit/idem/store"
)

func attrOf(s *spantest.Span, key string) string {
	for _, kv := range s.Attributes() {
		if string(kv.Key) == key {
			return kv.Value.Emit()
		}
	}
	return ""
}

// A scheduled effect remembers the span that scheduled it; the worker's
// idem.effect.call span is its child, one per attempt with the attempt and
// outcome, and the call made through idemhttp.Transport carries the effect
// key as Idempotency-Key and the call span as traceparent. Do traces its
// call the same way.
func TestEffectCallSpans(t *testing.T) {
	forEachStore(t, func(t *testing.T, d store.Driver[any]) {
		rec := spantest.NewRecorder()
		l := newLedger(t, d, effect.Config{TracerProvider: rec})

		var mu sync.Mutex
		var keys, parents []string
		provider := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			mu.Lock()
			keys = append(keys, r.Header.Get(idemhttp.HeaderKey))
			parents = append(parents, r.Header.Get("traceparent"))
			mu.Unlock()
		}))
		defer provider.Close()
		client := &http.Client{Transport: &idemhttp.Transport{}}
		calls := 0
		w := fastWorker(t, l, effect.WorkerConfig[any]{})
		if err := w.Register("mail", func(ctx context.Context, key string, _ []byte) ([]byte, error) {
			req, _ := http.NewRequestWithContext(ctx, http.MethodPost, provider.URL, nil)
			resp, err := client.Do(req)
			if err != nil {
				return nil, err
			}
			resp.Body.Close()
			calls++
			if calls == 1 {
				return nil, errors.New("provider hiccup")
			}
			return []byte("sent"), nil
		}); err != nil {
			t.Fatal(err)
		}

		ctx, parent := rec.Tracer("test").Start(context.Background(), "consume")
		err := store.InTx(ctx, d, func(tx any) error {
			_, _, err := l.ScheduleTx(ctx, tx, effect.Effect{Key: "mail:1", Kind: "mail", Payload: []byte("{}")})
			return err
		})
		if err != nil {
			t.Fatal(err)
		}
		parent.End()
		stop := runWorker(t, w)
		waitCompleted(t, l, "mail:1")
		stop()
		if _, err := l.Do(ctx, "inline:1", func(ctx context.Context, key string) ([]byte, error) {
			if got := idemhttp.CarriedKey(ctx); got != key {
				t.Errorf("Do: carried key %q, want %q", got, key)
			}
			return nil, nil
		}); err != nil {
			t.Fatal(err)
		}

		var callSpans []*spantest.Span
		for _, s := range rec.Ended() {
			if s.Name() == "idem.effect.call" {
				callSpans = append(callSpans, s)
			}
		}
		if len(callSpans) != 3 {
			t.Fatalf("%d idem.effect.call spans, want 3 (retry, completed, inline)", len(callSpans))
		}
		for i, want := range []struct{ kind, attempt, outcome string }{{"mail", "1", "retry"}, {"mail", "2", "completed"}, {"inline", "1", "completed"}} {
			s := callSpans[i]
			got := struct{ kind, attempt, outcome string }{attrOf(s, "idem.effect.kind"), attrOf(s, "idem.attempt"), attrOf(s, "idem.outcome")}
			if got != want {
				t.Errorf("call %d: %+v, want %+v", i, got, want)
			}
			if s.Parent().SpanID() != parent.SpanContext().SpanID() || s.SpanContext().TraceID() != parent.SpanContext().TraceID() {
				t.Errorf("call %d is not a child of the scheduling span", i)
			}
			if attrOf(s, "idem.effect.key_hash") == "" {
				t.Errorf("call %d has no key hash", i)
			}
		}
		mu.Lock()
		defer mu.Unlock()
		for i := range keys {
			if keys[i] != "mail:1" {
				t.Errorf("provider call %d got Idempotency-Key %q", i, keys[i])
			}
			want := "00-" + callSpans[i].SpanContext().TraceID().String() + "-" + callSpans[i].SpanContext().SpanID().String() + "-01"
			if parents[i] != want {
				t.Errorf("provider call %d traceparent %q, want %q", i, parents[i], want)
			}
		}
		if len(keys) != 2 {
			t.Errorf("%d provider calls, want 2", len(keys))
		}
	})
}

// WorkerConfig.TracerProvider takes over the Ledger's for the calls the
// worker makes: their idem.effect.call spans go to the worker's provider,
// none to the Ledger's.
// waitCompleted waits (up to a minute) until the effect key is completed.
func waitCompleted(t *testing.T, l *effect.Ledger[any], key string) {
	t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for {
		e, err := l.Get(context.Background(), key)
		if err == nil && e.State == effect.Completed {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("effect %s not completed: %+v %v", key, e, err)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func TestWorkerTracerProvider(t *testing.T) {
	forEachStore(t, func(t *testing.T, d store.Driver[any]) {
		ledgerRec, workerRec := spantest.NewRecorder(), spantest.NewRecorder()
		l := newLedger(t, d, effect.Config{TracerProvider: ledgerRec})
		w := fastWorker(t, l, effect.WorkerConfig[any]{TracerProvider: workerRec})
		if err := w.Register("mail", func(context.Context, string, []byte) ([]byte, error) { return []byte("sent"), nil }); err != nil {
			t.Fatal(err)
		}
		ctx := context.Background()
		if err := store.InTx(ctx, d, func(tx any) error {
			_, _, err := l.ScheduleTx(ctx, tx, effect.Effect{Key: "mail:tp", Kind: "mail", Payload: []byte("{}")})
			return err
		}); err != nil {
			t.Fatal(err)
		}
		stop := runWorker(t, w)
		waitCompleted(t, l, "mail:tp")
		stop()
		count := func(rec *spantest.Recorder) (n int) {
			for _, s := range rec.Ended() {
				if s.Name() == "idem.effect.call" {
					n++
				}
			}
			return n
		}
		if w, l := count(workerRec), count(ledgerRec); w != 1 || l != 0 {
			t.Errorf("idem.effect.call spans: %d on the worker's provider, %d on the ledger's; want 1 and 0", w, l)
		}
	})
}
