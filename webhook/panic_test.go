package webhook_test

import (
	"net/http"
	"testing"
)

// An EnqueueTx that panics (after writing) is recovered: its transaction
// rolls back, nothing is recorded, the sender gets 503 with Retry-After
// (problem+json) and its retry is a first delivery. Before, the panic went
// up to net/http, which cut the connection without an answer.
func TestEnqueuePanic(t *testing.T) {
	t.Parallel()
	forEachStore(t, func(t *testing.T, e *env) {
		body := `{"type":"invoice.paid"}`
		e.panic.Store(true)
		if code, _ := e.post(t, e.signed(t, "msg_p1", body), body); code != http.StatusServiceUnavailable {
			t.Fatalf("panicking enqueue answered %d, want 503", code)
		}
		if e.receipts(t, "msg_p1") != 0 || e.jobs(t, "msg_p1") != 0 {
			t.Fatalf("a panicking enqueue left %d receipts and %d jobs, want none", e.receipts(t, "msg_p1"), e.jobs(t, "msg_p1"))
		}
		e.panic.Store(false)
		if code, _ := e.post(t, e.signed(t, "msg_p1", body), body); code != http.StatusAccepted {
			t.Fatalf("retry answered %d, want 202", code)
		}
		if e.receipts(t, "msg_p1") != 1 || e.jobs(t, "msg_p1") != 1 {
			t.Errorf("after the retry: %d receipts, %d jobs; want 1 and 1", e.receipts(t, "msg_p1"), e.jobs(t, "msg_p1"))
		}
	})
}
