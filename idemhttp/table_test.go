package idemhttp_test

import (
	"context"
	"errors"
	"maps"
	"net/http"
	"testing"
	"time"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/idemhttp"
	"github.com/idemkit/idem/internal/operator"
	"github.com/idemkit/idem/internal/testdb"
)

// The in-progress state is stored as "in_progress" (since migration 0010).
func TestStateInProgressIsStored(t *testing.T) {
	if idemhttp.StateInProgress != "in_progress" {
		t.Fatalf("StateInProgress %q, want in_progress", idemhttp.StateInProgress)
	}
}

// The table's owner functions: Counts per stored state, ListHeld with the
// whole record in one query, and Expire by expires_at in batches.
func TestCountsListHeldExpire(t *testing.T) {
	testdb.EachDriver(t, func(t *testing.T, d testdb.Driver) {
		ctx := context.Background()
		e := newEnv(t, d.D)
		clk := &clock{now: time.Unix(1_700_000_000, 0)}
		unknown := true
		a := &app{hook: func(r *http.Request) int {
			if unknown {
				idemhttp.KeepPending(r.Context())
				return http.StatusBadGateway
			}
			return 0
		}}
		cfg := idemhttp.Config{Mode: idemhttp.TwoPhase, Lease: 10 * time.Second, ExpiredPolicy: idem.Hold,
			Retention: time.Hour, Now: clk.Now}
		h := e.handler(t, cfg, a)
		counts := func(want map[string]int64) {
			t.Helper()
			got, err := operator.HTTPKeyCounts(ctx, d.D)
			if err != nil || !maps.Equal(got, want) {
				t.Fatalf("Counts = %v, %v; want %v", got, err, want)
			}
		}
		counts(map[string]int64{})

		wantStatus(t, do(h, req{tenant: "acme", key: "held", body: `{"a":1}`}), 502)
		counts(map[string]int64{"in_progress": 1})
		unknown = false
		clk.Add(11 * time.Second)
		wantProblem(t, do(h, req{tenant: "acme", key: "held", body: `{"a":1}`}), 409, idemhttp.TypeNeedsReconciliation)
		wantStatus(t, do(h, req{tenant: "acme", key: "done", body: `{}`}), 201)
		counts(map[string]int64{"failed": 1, "completed": 1})

		held, err := idemhttp.ListHeld(ctx, d.D, 0)
		if err != nil || len(held) != 1 {
			t.Fatalf("ListHeld = %v, %v; want one record", held, err)
		}
		want, err := e.lookup("acme", "POST /orders", "held")
		if err != nil {
			t.Fatal(err)
		}
		got := held[0]
		if got.Tenant != "acme" || got.Operation != "POST /orders" || got.Key != "held" || got.State != idemhttp.StateFailed ||
			got.Fingerprint != want.Fingerprint || got.Token != want.Token || !got.CreatedAt.Equal(want.CreatedAt) ||
			!got.ExpiresAt.Equal(want.ExpiresAt) || got.Header == nil {
			t.Fatalf("ListHeld record %+v, want %+v", got, want)
		}

		// The operator resolves the held key: a retry replays the given
		// response; releasing a key that is not held is refused.
		if err := idemhttp.ResolveHeld(ctx, d.D, idemhttp.Resolution{Tenant: "acme", Operation: "POST /orders", Key: "held",
			Status: 201, Header: http.Header{"Location": {"/orders/x"}}, Body: []byte(`{"resolved":true}`), CompletedAt: clk.Now()}); err != nil {
			t.Fatal(err)
		}
		w := do(h, req{tenant: "acme", key: "held", body: `{"a":1}`})
		wantStatus(t, w, 201)
		if w.Body.String() != `{"resolved":true}` || w.Header().Get("Location") != "/orders/x" || w.Header().Get(idemhttp.HeaderReplayed) != "true" {
			t.Fatalf("replay after ResolveHeld: %s %v", w.Body, w.Header())
		}
		if err := idemhttp.ReleaseHeld(ctx, d.D, "acme", "POST /orders", "done"); !errors.Is(err, idemhttp.ErrNotHeld) {
			t.Fatalf("ReleaseHeld of a completed key = %v, want ErrNotHeld", err)
		}
		counts(map[string]int64{"completed": 2})

		// Nothing is past its retention yet.
		if n, err := operator.HTTPKeyExpire(ctx, d.D, clk.Now(), 10); err != nil || n != 0 {
			t.Fatalf("Expire before retention = %d, %v; want 0", n, err)
		}
		horizon := clk.Now().Add(2 * time.Hour)
		for i, want := range []int64{1, 1, 0} {
			if n, err := operator.HTTPKeyExpire(ctx, d.D, horizon, 1); err != nil || n != want {
				t.Fatalf("Expire batch %d = %d, %v; want %d", i, n, err, want)
			}
		}
		counts(map[string]int64{})
		if held, err := idemhttp.ListHeld(ctx, d.D, 10); err != nil || len(held) != 0 || held == nil {
			t.Fatalf("ListHeld after Expire = %#v, %v; want an empty list", held, err)
		}
	})
}
