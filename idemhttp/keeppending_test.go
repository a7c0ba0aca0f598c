package idemhttp_test

import (
	"net/http"
	"testing"
	"time"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/idemhttp"
)

// A handler that calls KeepPending leaves its key pending: a retry inside
// the lease is in flight, after the lease the policy decides.
func TestKeepPendingLeavesKeyToThePolicy(t *testing.T) {
	for _, policy := range []idem.ExpiredLease{idem.Retake, idem.Hold} {
		t.Run(policy.String(), func(t *testing.T) {
			forEachDriver(t, func(t *testing.T, e *env) {
				clk := &clock{now: time.Unix(1_700_000_000, 0)}
				unknown := true
				a := &app{hook: func(r *http.Request) int {
					if unknown {
						idemhttp.KeepPending(r.Context())
						return http.StatusBadGateway
					}
					return 0
				}}
				h := e.handler(t, idemhttp.Config{Mode: idemhttp.TwoPhase, Lease: 10 * time.Second, ExpiredPolicy: policy, Now: clk.Now}, a)
				wantStatus(t, do(h, req{tenant: "acme", key: "k", body: `{}`}), 502)
				rec, err := e.lookup("acme", "POST /orders", "k")
				if err != nil || rec.State != idemhttp.StateInProgress {
					t.Fatalf("record after KeepPending: %+v, %v; want pending", rec, err)
				}
				unknown = false
				wantStatus(t, do(h, req{tenant: "acme", key: "k", body: `{}`}), 409)
				clk.Add(11 * time.Second)
				w := do(h, req{tenant: "acme", key: "k", body: `{}`})
				switch policy {
				case idem.Retake:
					wantStatus(t, w, 201)
					if a.execs.Load() != 2 {
						t.Fatalf("%d executions, want 2 (the abandoned one and the re-execution)", a.execs.Load())
					}
				case idem.Hold:
					wantStatus(t, w, 409)
					if rec, err := e.lookup("acme", "POST /orders", "k"); err != nil || rec.State != idemhttp.StateFailed {
						t.Fatalf("record after the lease under Hold: %+v, %v; want failed", rec, err)
					}
					if a.execs.Load() != 1 {
						t.Fatalf("%d executions, want 1", a.execs.Load())
					}
				}
			})
		})
	}
}
