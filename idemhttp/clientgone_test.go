package idemhttp_test

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/idemkit/idem/idemhttp"
)

// cancelKey carries a request's cancel, which the handler calls as it
// returns: the client hangs up at the worst moment.
type cancelKey struct{}

// TestClientLeavingAsHandlerReturnsNeverHidesACommit: a client that hangs
// up as the handler returns may or may not get its work recorded, but the
// answer must say which. A cancellation that reached the transaction after
// the handler returned used to interrupt the COMMIT on database/sql
// (drivers run it on the transaction's context): the server committed, the
// middleware answered 5xx "nothing was recorded", and the rows appeared
// after the answer.
func TestClientLeavingAsHandlerReturnsNeverHidesACommit(t *testing.T) {
	forEachDriver(t, func(t *testing.T, e *env) {
		a := &app{hook: func(r *http.Request) int {
			if cancel, ok := r.Context().Value(cancelKey{}).(context.CancelFunc); ok {
				cancel()
			}
			return 0
		}}
		h := e.handler(t, idemhttp.Config{}, a)
		outcomes := map[string]int{}
		for i := range 150 {
			key := fmt.Sprintf("gone-%d", i)
			ctx, cancel := context.WithCancel(context.Background())
			r := req{tenant: "acme", key: key, body: `{"qty":1}`}.build()
			r = r.WithContext(context.WithValue(ctx, cancelKey{}, cancel))
			w := httptest.NewRecorder()
			h.ServeHTTP(w, r)
			cancel()
			time.Sleep(2 * time.Millisecond) // a commit the answer hid lands meanwhile
			rows := e.count(t, `SELECT count(*) FROM orders WHERE idem_key = $1`, key)
			rec, err := e.lookup("acme", "POST /orders", key)
			recorded := err == nil && rec != nil && rec.State == idemhttp.StateCompleted
			switch {
			case w.Code == http.StatusCreated && (rows != 1 || !recorded):
				t.Fatalf("key %s: answered 201, but %d order rows, a completed record %v (%v)", key, rows, recorded, err)
			case w.Code >= 500 && (rows != 0 || recorded):
				t.Fatalf("key %s: answered %d (nothing recorded), but %d order rows and a completed record (%v) are committed", key, w.Code, rows, recorded)
			case w.Code != http.StatusCreated && w.Code < 500:
				t.Fatalf("key %s: answered %d: %s", key, w.Code, w.Body)
			}
			outcomes[fmt.Sprint(w.Code)]++
		}
		t.Logf("answers: %v", outcomes)
	})
}
