package idemhttp_test

import (
	"net/http"
	"testing"

	"github.com/idemkit/idem/idemhttp"
)

// The same key on another concrete path of one route (account B after
// account A) is another request: 422, and A's response is never served for B.
func TestFingerprintCoversPath(t *testing.T) {
	forEachDriver(t, func(t *testing.T, e *env) {
		a := &app{}
		h := e.handler(t, idemhttp.Config{}, a)
		first := do(h, req{path: "/accounts/A/charge", tenant: "acme", key: "k", body: `{"amount":5}`})
		wantStatus(t, first, http.StatusCreated)
		wantProblem(t, do(h, req{path: "/accounts/B/charge", tenant: "acme", key: "k", body: `{"amount":5}`}),
			http.StatusUnprocessableEntity, idemhttp.TypeKeyReused)
		// The escaped path counts: a%2Fb and a%252Fb are different accounts.
		wantStatus(t, do(h, req{path: "/accounts/a%2Fb/charge", tenant: "acme", key: "esc", body: `{}`}), http.StatusCreated)
		wantProblem(t, do(h, req{path: "/accounts/a%252Fb/charge", tenant: "acme", key: "esc", body: `{}`}),
			http.StatusUnprocessableEntity, idemhttp.TypeKeyReused)
		wantReplay(t, do(h, req{path: "/accounts/A/charge", tenant: "acme", key: "k", body: `{"amount":5}`}), first)
		if a.execs.Load() != 2 {
			t.Fatalf("handler ran %d times, want 2", a.execs.Load())
		}
	})
}

// The query is part of the request: another amount is 422; the same
// parameters in another order replay; the order of repeated values of one
// parameter counts.
func TestFingerprintCoversQuery(t *testing.T) {
	forEachDriver(t, func(t *testing.T, e *env) {
		a := &app{}
		h := e.handler(t, idemhttp.Config{}, a)
		first := do(h, req{path: "/refund?amount=1", tenant: "acme", key: "r", body: `{}`})
		wantStatus(t, first, http.StatusCreated)
		for _, p := range []string{"/refund?amount=999999", "/refund", "/refund?amount=1&amount=1", "/refund?amount=1&x=",
			"/refund?amount=1;x=2", "/refund?amount=%31%zz"} {
			wantProblem(t, do(h, req{path: p, tenant: "acme", key: "r", body: `{}`}), http.StatusUnprocessableEntity, idemhttp.TypeKeyReused)
		}
		wantReplay(t, do(h, req{path: "/refund?amount=%31", tenant: "acme", key: "r", body: `{}`}), first)

		multi := do(h, req{path: "/refund?b=2&a=1&a=3", tenant: "acme", key: "m", body: `{}`})
		wantStatus(t, multi, http.StatusCreated)
		wantReplay(t, do(h, req{path: "/refund?a=1&b=2&a=3", tenant: "acme", key: "m", body: `{}`}), multi)
		wantProblem(t, do(h, req{path: "/refund?a=3&b=2&a=1", tenant: "acme", key: "m", body: `{}`}),
			http.StatusUnprocessableEntity, idemhttp.TypeKeyReused)

		// A query that does not parse is compared byte for byte.
		raw := do(h, req{path: "/refund?amount=1;x=2", tenant: "acme", key: "raw", body: `{}`})
		wantStatus(t, raw, http.StatusCreated)
		wantReplay(t, do(h, req{path: "/refund?amount=1;x=2", tenant: "acme", key: "raw", body: `{}`}), raw)
		wantProblem(t, do(h, req{path: "/refund?amount=1;x=3", tenant: "acme", key: "raw", body: `{}`}),
			http.StatusUnprocessableEntity, idemhttp.TypeKeyReused)
		if a.execs.Load() != 3 {
			t.Fatalf("handler ran %d times, want 3", a.execs.Load())
		}
	})
}

// ExcludeQuery leaves cache busters out of the fingerprint.
func TestExcludeQuery(t *testing.T) {
	forEachDriver(t, func(t *testing.T, e *env) {
		a := &app{}
		h := e.handler(t, idemhttp.Config{ExcludeQuery: []string{"_"}}, a)
		first := do(h, req{path: "/refund?amount=1&_=1700000000", tenant: "acme", key: "r", body: `{}`})
		wantStatus(t, first, http.StatusCreated)
		wantReplay(t, do(h, req{path: "/refund?_=1700000005&amount=1", tenant: "acme", key: "r", body: `{}`}), first)
		wantReplay(t, do(h, req{path: "/refund?amount=1", tenant: "acme", key: "r", body: `{}`}), first)
		wantProblem(t, do(h, req{path: "/refund?amount=2&_=1700000000", tenant: "acme", key: "r", body: `{}`}),
			http.StatusUnprocessableEntity, idemhttp.TypeKeyReused)
		if a.execs.Load() != 1 {
			t.Fatalf("handler ran %d times, want 1", a.execs.Load())
		}
	})
}

// The media type is part of the request: the same key and bytes sent as
// form data and then as text/plain, or as a JSON merge patch and then as a
// JSON patch, are two requests (422), never a replay. Parameters and the
// case of the media type do not count.
func TestFingerprintCoversMediaType(t *testing.T) {
	forEachDriver(t, func(t *testing.T, e *env) {
		a := &app{}
		h := e.handler(t, idemhttp.Config{}, a)
		form := do(h, req{tenant: "acme", key: "form", body: `a=1&b=2`, contentType: "application/x-www-form-urlencoded"})
		wantStatus(t, form, http.StatusCreated)
		wantProblem(t, do(h, req{tenant: "acme", key: "form", body: `a=1&b=2`, contentType: "text/plain"}),
			http.StatusUnprocessableEntity, idemhttp.TypeKeyReused)
		wantReplay(t, do(h, req{tenant: "acme", key: "form", body: `a=1&b=2`,
			contentType: "Application/X-WWW-Form-Urlencoded; charset=utf-8"}), form)

		merge := do(h, req{tenant: "acme", key: "patch", body: `{"qty":1,"note":null}`, contentType: "application/merge-patch+json"})
		wantStatus(t, merge, http.StatusCreated)
		wantProblem(t, do(h, req{tenant: "acme", key: "patch", body: `{"qty":1,"note":null}`, contentType: "application/json-patch+json"}),
			http.StatusUnprocessableEntity, idemhttp.TypeKeyReused)
		wantProblem(t, do(h, req{tenant: "acme", key: "patch", body: `{"qty":1,"note":null}`, contentType: "application/json"}),
			http.StatusUnprocessableEntity, idemhttp.TypeKeyReused)
		// Still canonical JSON within one media type: reordered keys replay.
		wantReplay(t, do(h, req{tenant: "acme", key: "patch", body: `{"note":null, "qty":1}`,
			contentType: "application/merge-patch+json;charset=UTF-8"}), merge)
		if a.execs.Load() != 2 {
			t.Fatalf("handler ran %d times, want 2", a.execs.Load())
		}
	})
}
