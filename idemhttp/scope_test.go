package idemhttp_test

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/idemkit/idem/idemhttp"
)

// wantRejected: a 4xx problem, no Retry-After, the handler did not run and
// nothing was stored.
func wantRejected(t *testing.T, e *env, a *app, w *httptest.ResponseRecorder, status int, typ string) {
	t.Helper()
	wantProblem(t, w, status, typ)
	if ra := w.Header().Get("Retry-After"); ra != "" {
		t.Fatalf("Retry-After %q on a request that can never succeed", ra)
	}
	if a.execs.Load() != 0 {
		t.Fatalf("handler ran %d times", a.execs.Load())
	}
	if n := e.count(t, `SELECT count(*) FROM `+e.keys) + e.count(t, `SELECT count(*) FROM orders`); n != 0 {
		t.Fatalf("%d rows stored", n)
	}
}

var badText = map[string]string{
	"nul":          "acme\x00",
	"invalid-utf8": "acme\xff",
	"lone-byte":    "\xc3",
	"surrogate":    "\xed\xa0\x80",
	"too-long":     strings.Repeat("t", 2000),
}

// A tenant that is not text the store can hold (NUL, invalid UTF-8, too
// long) answers 401 before the store, on every dialect.
func TestInvalidTenantIs401(t *testing.T) {
	forEachDriver(t, func(t *testing.T, e *env) {
		for name, tenant := range badText {
			t.Run(name, func(t *testing.T) {
				a := &app{}
				h := e.handler(t, idemhttp.Config{Tenant: func(*http.Request) (string, error) { return tenant, nil }}, a)
				wantRejected(t, e, a, do(h, req{key: "k", body: `{}`}), http.StatusUnauthorized, idemhttp.TypeUnauthorized)
			})
		}
	})
}

// An operation that is not storable text answers 400 before the store,
// whether it comes from Config.Operation or from the path when the
// middleware runs before routing.
func TestInvalidOperationIs400(t *testing.T) {
	forEachDriver(t, func(t *testing.T, e *env) {
		for name, op := range badText {
			t.Run(name, func(t *testing.T) {
				a := &app{}
				h := e.handler(t, idemhttp.Config{Operation: func(*http.Request) string { return op }}, a)
				wantRejected(t, e, a, do(h, req{tenant: "acme", key: "k", body: `{}`}), http.StatusBadRequest, idemhttp.TypeOperationInvalid)
			})
		}
		for _, path := range []string{"/orders/%00", "/orders/%ff", "/orders/%ed%a0%80", "/" + strings.Repeat("p", 2000)} {
			t.Run("path"+path[:min(len(path), 12)], func(t *testing.T) {
				a := &app{}
				h := e.bare(t, idemhttp.Config{}, a)
				wantRejected(t, e, a, do(h, req{path: path, tenant: "acme", key: "k", body: `{}`}), http.StatusBadRequest, idemhttp.TypeOperationInvalid)
			})
		}
	})
}

// Safe methods and keyless requests with such paths never reach the store
// through the middleware, so the middleware never answers 5xx for them.
func TestHostilePathsPassThrough(t *testing.T) {
	forEachDriver(t, func(t *testing.T, e *env) {
		a := &app{}
		h := e.bare(t, idemhttp.Config{}, a)
		for _, path := range []string{"/orders/%00", "/orders/%ff"} {
			for _, method := range []string{"GET", "HEAD", "PUT"} {
				w := do(h, req{method: method, path: path, tenant: "acme", body: ``})
				if w.Code != http.StatusCreated {
					t.Fatalf("%s %s: %d %s, want the handler's 201", method, path, w.Code, w.Body.String())
				}
			}
		}
		if n := e.count(t, `SELECT count(*) FROM `+e.keys); n != 0 {
			t.Fatalf("%d key records for requests without a key", n)
		}
	})
}

// The key itself: NUL and invalid UTF-8 are rejected by parsing (400),
// before the store.
func TestInvalidKeyNeverReachesStore(t *testing.T) {
	forEachDriver(t, func(t *testing.T, e *env) {
		for name, key := range map[string]string{"nul": "k\x00", "invalid-utf8": "k\xff", "quoted-nul": "\"k\x00\"", "quoted-utf8": "\"k\xc3\""} {
			t.Run(name, func(t *testing.T) {
				a := &app{}
				h := e.handler(t, idemhttp.Config{}, a)
				r := req{tenant: "acme", body: `{}`, header: http.Header{"Idempotency-Key": {key}}}
				wantRejected(t, e, a, do(h, r), http.StatusBadRequest, idemhttp.TypeKeyInvalid)
			})
		}
	})
}
