package idemhttp_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idemkit/idem/idemhttp"
	"github.com/idemkit/idem/internal/testdb"
	"github.com/idemkit/idem/store"
)

// forEachDriver runs test on every driver (testdb.EachDriver: SQLite, pgx
// and database/sql on PostgreSQL), each with fresh, migrated tables and a
// business table "orders"; opts are EachDriver's (testdb.Serial for tests
// that measure the process).
func forEachDriver(t *testing.T, test func(t *testing.T, e *env), opts ...testdb.Option) {
	t.Helper()
	testdb.EachDriver(t, func(t *testing.T, d testdb.Driver) { test(t, newEnv(t, d.D)) }, opts...)
}

type clock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *clock) Now() time.Time      { c.mu.Lock(); defer c.mu.Unlock(); return c.now }
func (c *clock) Add(d time.Duration) { c.mu.Lock(); c.now = c.now.Add(d); c.mu.Unlock() }

// app is the business handler under test: POST /orders inserts one row
// into "orders" (on the request transaction in transactional mode, on the
// pool in two-phase mode, where it stands for an external effect) and
// answers 201 with a body naming the execution number, so a second
// execution would be visible in the body.
type app struct {
	execs atomic.Int64
	// hook, if set, runs after the insert; a non-zero status replaces 201.
	hook func(r *http.Request) int
	// write, if set, writes the response body instead of the JSON.
	write func(w http.ResponseWriter)
}

// env hides the transaction type so one test body serves every driver.
type env struct {
	dialect store.Dialect
	clock   *clock
	keys    string // the qualified idempotency_keys table
	// handler returns a mux with POST /orders (also GET and PUT),
	// POST /accounts/{id}/charge and POST /refund behind a fresh middleware.
	handler func(t *testing.T, cfg idemhttp.Config, a *app) http.Handler
	// bare returns the same business handler behind a fresh middleware with
	// no mux in front, as when the middleware runs before routing (no
	// r.Pattern: the default operation is the method plus the path).
	bare   func(t *testing.T, cfg idemhttp.Config, a *app) http.Handler
	count  func(t *testing.T, sql string, args ...any) int
	exec   func(t *testing.T, sql string, args ...any)
	lookup func(tenant, op, key string) (*idemhttp.Record, error)
	forget func(tenant, op, key string) error
	// txString runs a one-value query on the request transaction in ctx.
	txString func(ctx context.Context, sql string) (string, error)
}

func tenantHeader(r *http.Request) (string, error) {
	t := r.Header.Get("X-Tenant")
	if t == "" {
		return "", errors.New("no tenant")
	}
	return t, nil
}

func newEnv[TTx any](t *testing.T, d store.Driver[TTx]) *env {
	testdb.Exec(t, d, `CREATE TABLE orders (tenant text NOT NULL, idem_key text NOT NULL, exec integer NOT NULL, body text NOT NULL)`)
	clk := &clock{now: time.Now()}
	e := &env{dialect: d.Dialect(), clock: clk, keys: d.Table("idempotency_keys")}
	build := func(t *testing.T, cfg idemhttp.Config, a *app) (*idemhttp.Middleware[TTx], http.Handler) {
		if cfg.Now == nil {
			cfg.Now = clk.Now
		}
		if cfg.Tenant == nil {
			cfg.Tenant = tenantHeader
		}
		mw, err := idemhttp.New(d, cfg)
		if err != nil {
			t.Fatal(err)
		}
		orders := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			ctx := r.Context()
			body, err := io.ReadAll(r.Body)
			if err != nil {
				http.Error(w, err.Error(), http.StatusBadRequest)
				return
			}
			n := a.execs.Add(1)
			q := d.Pool()
			if tx, ok := idemhttp.Tx[TTx](ctx); ok {
				q = d.Tx(tx)
			} else if cfg.Mode == idemhttp.Transactional && idemhttp.Key(ctx) != "" {
				http.Error(w, "no transaction in context", http.StatusInternalServerError)
				return
			}
			if _, err := q.Exec(ctx, `INSERT INTO orders (tenant, idem_key, exec, body) VALUES ($1, $2, $3, $4)`,
				idemhttp.Tenant(ctx), idemhttp.Key(ctx), n, string(body)); err != nil {
				http.Error(w, err.Error(), http.StatusInternalServerError)
				return
			}
			idemhttp.SetResource(ctx, "order", fmt.Sprint(n))
			status := http.StatusCreated
			if a.hook != nil {
				if s := a.hook(r); s != 0 {
					status = s
				}
			}
			w.Header().Set("Content-Type", "application/json")
			w.Header().Set("Location", fmt.Sprintf("/orders/%d", n))
			w.Header().Set("X-Not-Replayed", "1")
			w.WriteHeader(status)
			if a.write != nil {
				a.write(w)
				return
			}
			fmt.Fprintf(w, `{"order":%d,"tenant":%q,"key":%q}`, n, idemhttp.Tenant(ctx), idemhttp.Key(ctx))
		})
		return mw, orders
	}
	e.bare = func(t *testing.T, cfg idemhttp.Config, a *app) http.Handler {
		mw, orders := build(t, cfg, a)
		return mw.Handler(orders)
	}
	e.handler = func(t *testing.T, cfg idemhttp.Config, a *app) http.Handler {
		mw, orders := build(t, cfg, a)
		mux := http.NewServeMux()
		mux.Handle("POST /orders", mw.Handler(orders))
		mux.Handle("GET /orders", mw.Handler(orders))
		mux.Handle("PUT /orders", mw.Handler(orders))
		mux.Handle("POST /accounts/{id}/charge", mw.Handler(orders))
		mux.Handle("POST /refund", mw.Handler(orders))
		return mux
	}
	e.count = func(t *testing.T, sql string, args ...any) int { return testdb.Count(t, d, sql, args...) }
	e.exec = func(t *testing.T, sql string, args ...any) { testdb.Exec(t, d, sql, args...) }
	e.lookup = func(tenant, op, key string) (*idemhttp.Record, error) {
		return idemhttp.Lookup(context.Background(), d, tenant, op, key)
	}
	e.forget = func(tenant, op, key string) error {
		return idemhttp.Forget(context.Background(), d, tenant, op, key)
	}
	e.txString = func(ctx context.Context, sql string) (string, error) {
		tx, ok := idemhttp.Tx[TTx](ctx)
		if !ok {
			return "", errors.New("no transaction")
		}
		var v string
		err := d.Tx(tx).QueryRow(ctx, sql).Scan(&v)
		return v, err
	}
	return e
}

// req is one test request.
type req struct {
	method, path string
	tenant, key  string // key "" = no header
	body         string
	contentType  string
	header       http.Header
}

func (q req) build() *http.Request {
	if q.method == "" {
		q.method = http.MethodPost
	}
	if q.path == "" {
		q.path = "/orders"
	}
	r := httptest.NewRequest(q.method, q.path, strings.NewReader(q.body))
	if q.tenant != "" {
		r.Header.Set("X-Tenant", q.tenant)
	}
	if q.key != "" {
		r.Header.Set("Idempotency-Key", q.key)
	}
	ct := q.contentType
	if ct == "" {
		ct = "application/json"
	}
	r.Header.Set("Content-Type", ct)
	for k, v := range q.header {
		r.Header[k] = v
	}
	return r
}

func do(h http.Handler, q req) *httptest.ResponseRecorder {
	w := httptest.NewRecorder()
	h.ServeHTTP(w, q.build())
	return w
}

func wantStatus(t *testing.T, w *httptest.ResponseRecorder, status int) {
	t.Helper()
	if w.Code != status {
		body := w.Body.String()
		if len(body) > 500 {
			body = body[:500] + "…"
		}
		t.Fatalf("status %d, want %d; body %s", w.Code, status, body)
	}
}

func wantProblem(t *testing.T, w *httptest.ResponseRecorder, status int, typ string) {
	t.Helper()
	wantStatus(t, w, status)
	if ct := w.Header().Get("Content-Type"); ct != "application/problem+json" {
		t.Fatalf("Content-Type %q, want application/problem+json", ct)
	}
	if !strings.Contains(w.Body.String(), `"type":"`+typ+`"`) {
		t.Fatalf("problem %s, want type %s", w.Body.String(), typ)
	}
}

func wantReplay(t *testing.T, w *httptest.ResponseRecorder, original *httptest.ResponseRecorder) {
	t.Helper()
	if w.Code != original.Code || w.Body.String() != original.Body.String() {
		t.Fatalf("replay %d %s, want %d %s", w.Code, w.Body.String(), original.Code, original.Body.String())
	}
	if w.Header().Get(idemhttp.HeaderReplayed) != "true" {
		t.Fatalf("replay without %s: true", idemhttp.HeaderReplayed)
	}
}
