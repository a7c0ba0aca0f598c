package idemhttp_test

import (
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/idemhttp"
	"github.com/idemkit/idem/internal/testdb"
)

const op = "POST /orders"

func TestFirstRequestExecutesRetryReplays(t *testing.T) {
	forEachDriver(t, func(t *testing.T, e *env) {
		a := &app{}
		h := e.handler(t, idemhttp.Config{}, a)
		first := do(h, req{tenant: "acme", key: "k1", body: `{"seat":"A1","qty":2}`})
		wantStatus(t, first, http.StatusCreated)
		if first.Header().Get(idemhttp.HeaderReplayed) != "" || first.Header().Get("X-Not-Replayed") != "1" {
			t.Fatalf("first response headers %v", first.Header())
		}
		for range 3 {
			w := do(h, req{tenant: "acme", key: "k1", body: `{"seat":"A1","qty":2}`})
			wantReplay(t, w, first)
			if w.Header().Get("Location") != first.Header().Get("Location") || w.Header().Get("Content-Type") != "application/json" {
				t.Fatalf("replayed headers %v, want Location and Content-Type of %v", w.Header(), first.Header())
			}
			if w.Header().Get("X-Not-Replayed") != "" {
				t.Fatal("a header outside ReplayHeaders was replayed")
			}
		}
		if n := e.count(t, `SELECT count(*) FROM orders`); n != 1 {
			t.Fatalf("%d effects, want 1", n)
		}
		rec, err := e.lookup("acme", op, "k1")
		if err != nil {
			t.Fatal(err)
		}
		if rec.State != idemhttp.StateCompleted || rec.Status != 201 || rec.ResourceType != "order" || rec.ResourceID != "1" {
			t.Fatalf("record %+v", rec)
		}
	})
}

// Same key, body with keys reordered and whitespace changed → replay.
func TestReorderedJSONReplays(t *testing.T) {
	forEachDriver(t, func(t *testing.T, e *env) {
		a := &app{}
		h := e.handler(t, idemhttp.Config{}, a)
		first := do(h, req{tenant: "acme", key: "k", body: `{"seat":"A1","qty":2,"meta":{"b":1,"a":[1,2]}}`})
		wantStatus(t, first, http.StatusCreated)
		w := do(h, req{tenant: "acme", key: "k", body: "{ \"meta\" : {\"a\":[1, 2],\n \"b\":1},\t\"qty\":2, \"seat\":\"A1\" }",
			contentType: "application/json; charset=utf-8"})
		wantReplay(t, w, first)
		if a.execs.Load() != 1 {
			t.Fatalf("handler ran %d times", a.execs.Load())
		}
	})
}

// Same key, different body → 422 and the handler does not run.
func TestDifferentBodyIs422(t *testing.T) {
	forEachDriver(t, func(t *testing.T, e *env) {
		a := &app{}
		h := e.handler(t, idemhttp.Config{}, a)
		wantStatus(t, do(h, req{tenant: "acme", key: "k", body: `{"qty":2}`}), http.StatusCreated)
		w := do(h, req{tenant: "acme", key: "k", body: `{"qty":3}`})
		wantProblem(t, w, http.StatusUnprocessableEntity, idemhttp.TypeKeyReused)
		// Raw bodies (non-JSON) are compared byte for byte.
		w = do(h, req{tenant: "acme", key: "k", body: `{"qty": 2}`, contentType: "text/plain"})
		wantProblem(t, w, http.StatusUnprocessableEntity, idemhttp.TypeKeyReused)
		if a.execs.Load() != 1 || e.count(t, `SELECT count(*) FROM orders`) != 1 {
			t.Fatalf("handler ran %d times", a.execs.Load())
		}
	})
}

// Tenant A and tenant B with the same key → two independent effects, each
// replaying only its own response.
func TestTenantsAreIndependent(t *testing.T) {
	forEachDriver(t, func(t *testing.T, e *env) {
		a := &app{}
		h := e.handler(t, idemhttp.Config{}, a)
		ra := do(h, req{tenant: "A", key: "same", body: `{"qty":1}`})
		rb := do(h, req{tenant: "B", key: "same", body: `{"qty":1}`})
		wantStatus(t, ra, http.StatusCreated)
		wantStatus(t, rb, http.StatusCreated)
		if ra.Body.String() == rb.Body.String() {
			t.Fatal("tenant B got tenant A's response")
		}
		wantReplay(t, do(h, req{tenant: "A", key: "same", body: `{"qty":1}`}), ra)
		wantReplay(t, do(h, req{tenant: "B", key: "same", body: `{"qty":1}`}), rb)
		// B reusing the key with another body conflicts only with B's record.
		wantStatus(t, do(h, req{tenant: "B", key: "same", body: `{"qty":9}`}), http.StatusUnprocessableEntity)
		for _, tn := range []string{"A", "B"} {
			if n := e.count(t, `SELECT count(*) FROM orders WHERE tenant = $1`, tn); n != 1 {
				t.Fatalf("tenant %s: %d effects, want 1", tn, n)
			}
		}
	})
}

// Handler panics / returns 500 → nothing stored, a retry executes.
func TestPanicAnd5xxStoreNothing(t *testing.T) {
	forEachDriver(t, func(t *testing.T, e *env) {
		var mode sync.Mutex
		fail := "panic"
		a := &app{hook: func(r *http.Request) int {
			mode.Lock()
			defer mode.Unlock()
			switch fail {
			case "panic":
				panic("boom")
			case "500":
				return http.StatusInternalServerError
			}
			return 0
		}}
		h := e.handler(t, idemhttp.Config{}, a)
		func() {
			defer func() {
				if p := recover(); p != "boom" {
					t.Fatalf("panic %v, want boom re-raised", p)
				}
			}()
			do(h, req{tenant: "acme", key: "k", body: `{}`})
		}()
		if n := e.count(t, `SELECT count(*) FROM orders`) + e.count(t, `SELECT count(*) FROM `+e.keys); n != 0 {
			t.Fatalf("%d rows after a panic, want 0", n)
		}
		mode.Lock()
		fail = "500"
		mode.Unlock()
		wantStatus(t, do(h, req{tenant: "acme", key: "k", body: `{}`}), http.StatusInternalServerError)
		if n := e.count(t, `SELECT count(*) FROM orders`) + e.count(t, `SELECT count(*) FROM `+e.keys); n != 0 {
			t.Fatalf("%d rows after a 500, want 0", n)
		}
		mode.Lock()
		fail = ""
		mode.Unlock()
		first := do(h, req{tenant: "acme", key: "k", body: `{}`})
		wantStatus(t, first, http.StatusCreated)
		wantReplay(t, do(h, req{tenant: "acme", key: "k", body: `{}`}), first)
		if n := e.count(t, `SELECT count(*) FROM orders`); n != 1 || a.execs.Load() != 3 {
			t.Fatalf("%d effects after %d executions, want 1 after 3", n, a.execs.Load())
		}
	})
}

// Statuses that mean "never started" are not stored (and roll back); other
// 4xx are stored and replayed.
func TestWhichStatusesAreStored(t *testing.T) {
	forEachDriver(t, func(t *testing.T, e *env) {
		status := 0
		a := &app{hook: func(r *http.Request) int { return status }}
		h := e.handler(t, idemhttp.Config{}, a)
		for i, s := range []int{400, 401, 403, 409, 422, 429, 503} {
			status = s
			wantStatus(t, do(h, req{tenant: "acme", key: "k", body: `{}`}), s)
			if n := e.count(t, `SELECT count(*) FROM `+e.keys) + e.count(t, `SELECT count(*) FROM orders`); n != 0 {
				t.Fatalf("status %d stored %d rows", s, n)
			}
			if a.execs.Load() != int64(i+1) {
				t.Fatalf("status %d: handler did not execute again", s)
			}
		}
		status = 404
		first := do(h, req{tenant: "acme", key: "k", body: `{}`})
		wantStatus(t, first, 404)
		status = 0
		wantReplay(t, do(h, req{tenant: "acme", key: "k", body: `{}`}), first)
	})
}

func TestKeyValidation(t *testing.T) {
	forEachDriver(t, func(t *testing.T, e *env) {
		a := &app{}
		h := e.handler(t, idemhttp.Config{}, a)
		wantProblem(t, do(h, req{tenant: "acme", body: `{}`}), 400, idemhttp.TypeKeyMissing)
		for _, bad := range []string{`""`, strings.Repeat("k", 256), "caf\xc3\xa9", "a b", `"unterminated`, `"a\nb"`, "\x01"} {
			wantProblem(t, do(h, req{tenant: "acme", key: bad, body: `{}`}), 400, idemhttp.TypeKeyInvalid)
		}
		two := req{tenant: "acme", key: "a", body: `{}`, header: http.Header{"Idempotency-Key": {"a", "b"}}}
		wantProblem(t, do(h, two), 400, idemhttp.TypeKeyInvalid)
		wantProblem(t, do(h, req{key: "k", body: `{}`}), 401, idemhttp.TypeUnauthorized)
		if a.execs.Load() != 0 {
			t.Fatal("handler ran for an invalid request")
		}
		// The quoted structured-field string and the bare token are one key.
		first := do(h, req{tenant: "acme", key: `"abc-123"`, body: `{}`})
		wantStatus(t, first, 201)
		wantReplay(t, do(h, req{tenant: "acme", key: "abc-123", body: `{}`}), first)
		wantStatus(t, do(h, req{tenant: "acme", key: strings.Repeat("k", 255), body: `{}`}), 201)
		// Safe methods and keyless PUT pass through untouched.
		wantStatus(t, do(h, req{method: "GET", tenant: "acme", body: ``}), 201)
		wantStatus(t, do(h, req{method: "PUT", tenant: "acme", body: `{}`}), 201)
		if a.execs.Load() != 4 {
			t.Fatalf("handler ran %d times, want 4", a.execs.Load())
		}
	})
}

func TestBodyLimits(t *testing.T) {
	forEachDriver(t, func(t *testing.T, e *env) {
		a := &app{}
		h := e.handler(t, idemhttp.Config{MaxBodyBytes: 64, MaxStoredBody: 16}, a)
		wantProblem(t, do(h, req{tenant: "acme", key: "big", body: `{"x":"` + strings.Repeat("a", 100) + `"}`}),
			http.StatusRequestEntityTooLarge, idemhttp.TypeBodyTooLarge)
		// A response above MaxStoredBody keeps status and Location only.
		first := do(h, req{tenant: "acme", key: "k", body: `{}`})
		wantStatus(t, first, 201)
		w := do(h, req{tenant: "acme", key: "k", body: `{}`})
		if w.Code != 201 || w.Body.Len() != 0 || w.Header().Get("Location") != first.Header().Get("Location") ||
			w.Header().Get(idemhttp.HeaderBodyOmitted) != "true" || w.Header().Get("Content-Type") != "" {
			t.Fatalf("omitted-body replay: %d %v %q", w.Code, w.Header(), w.Body.String())
		}
		if a.execs.Load() != 1 {
			t.Fatalf("handler ran %d times", a.execs.Load())
		}
	})
}

// 50 concurrent requests with one key and one body → one effect; every
// response is the original (status + body byte-identical) or a 409; a later
// retry replays.
func TestConcurrentDuplicates(t *testing.T) {
	for _, mode := range []idemhttp.Mode{idemhttp.Transactional, idemhttp.TwoPhase} {
		t.Run(mode.String(), func(t *testing.T) { testConcurrentDuplicates(t, mode) })
	}
}

func testConcurrentDuplicates(t *testing.T, mode idemhttp.Mode) {
	forEachDriver(t, func(t *testing.T, e *env) {
		a := &app{}
		h := e.handler(t, idemhttp.Config{Mode: mode}, a)
		const n = 50
		res := make([]*httptest.ResponseRecorder, n)
		var wg sync.WaitGroup
		start := make(chan struct{})
		for i := range n {
			wg.Go(func() {
				<-start
				res[i] = do(h, req{tenant: "acme", key: "race", body: `{"qty":1}`})
			})
		}
		close(start)
		wg.Wait()
		var original *httptest.ResponseRecorder
		conflicts := 0
		for _, w := range res {
			switch {
			case w.Code == 201 && w.Header().Get(idemhttp.HeaderReplayed) == "":
				if original != nil {
					t.Fatal("two original responses")
				}
				original = w
			case w.Code == 409:
				conflicts++
				if w.Header().Get("Retry-After") == "" {
					t.Fatal("409 without Retry-After")
				}
			}
		}
		if original == nil {
			t.Fatal("no original response")
		}
		for _, w := range res {
			if w.Code != 409 && (w.Code != original.Code || w.Body.String() != original.Body.String()) {
				t.Fatalf("response %d %s differs from the original %s", w.Code, w.Body.String(), original.Body.String())
			}
		}
		if got := e.count(t, `SELECT count(*) FROM orders`); got != 1 || a.execs.Load() != 1 {
			t.Fatalf("%d effects, %d executions; want 1", got, a.execs.Load())
		}
		wantReplay(t, do(h, req{tenant: "acme", key: "race", body: `{"qty":1}`}), original)
		t.Logf("%d of %d duplicates answered 409", conflicts, n-1)
	})
}

// Drill 1: the server commits, the response is lost (the connection drops
// before the client reads it); the client retries → replay, one effect.
func TestLostResponseRetryReplays(t *testing.T) {
	forEachDriver(t, func(t *testing.T, e *env) {
		a := &app{}
		h := e.handler(t, idemhttp.Config{}, a)
		var mu sync.Mutex
		lose := true
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			mu.Lock()
			l := lose
			lose = false
			mu.Unlock()
			if !l {
				h.ServeHTTP(w, r)
				return
			}
			h.ServeHTTP(httptest.NewRecorder(), r) // committed; the response goes nowhere
			conn, _, err := http.NewResponseController(w).Hijack()
			if err == nil {
				conn.Close()
			}
		}))
		defer srv.Close()
		send := func() (*http.Response, error) {
			r, _ := http.NewRequest("POST", srv.URL+"/orders", strings.NewReader(`{"qty":1}`))
			r.Header.Set("Idempotency-Key", "lost-1")
			r.Header.Set("X-Tenant", "acme")
			r.Header.Set("Content-Type", "application/json")
			return srv.Client().Do(r)
		}
		if _, err := send(); err == nil {
			t.Fatal("the first response was not lost")
		}
		resp, err := send()
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != 201 || resp.Header.Get(idemhttp.HeaderReplayed) != "true" {
			t.Fatalf("retry: %d replayed=%q, want 201 replayed", resp.StatusCode, resp.Header.Get(idemhttp.HeaderReplayed))
		}
		if n := e.count(t, `SELECT count(*) FROM orders`); n != 1 {
			t.Fatalf("%d effects, want 1", n)
		}
	})
}

// Drill 8: a record past its retention is treated as absent, so a genuine
// late retry executes again. This is the documented price of retention:
// keep records longer than any client retries.
func TestExpiredRecordExecutesAgain(t *testing.T) {
	forEachDriver(t, func(t *testing.T, e *env) {
		a := &app{}
		h := e.handler(t, idemhttp.Config{Retention: time.Hour, OperationRetention: map[string]time.Duration{"POST /other": time.Minute}}, a)
		first := do(h, req{tenant: "acme", key: "late", body: `{}`})
		wantStatus(t, first, 201)
		before, err := e.lookup("acme", op, "late")
		if err != nil {
			t.Fatal(err)
		}
		e.clock.Add(59 * time.Minute)
		wantReplay(t, do(h, req{tenant: "acme", key: "late", body: `{}`}), first)
		e.clock.Add(2 * time.Minute)
		again := do(h, req{tenant: "acme", key: "late", body: `{"changed":true}`})
		wantStatus(t, again, 201)
		if again.Header().Get(idemhttp.HeaderReplayed) != "" || again.Body.String() == first.Body.String() {
			t.Fatal("an expired record was replayed")
		}
		if n := e.count(t, `SELECT count(*) FROM orders`); n != 2 {
			t.Fatalf("%d effects, want 2 (the late retry executes again)", n)
		}
		rec, err := e.lookup("acme", op, "late")
		if err != nil || rec.Token != before.Token+1 || rec.Expired(e.clock.Now()) {
			t.Fatalf("record after re-execution: %+v, %v", rec, err)
		}
	})
}

// In transactional mode the response reaches the client only after the
// commit, and a failed commit leaves nothing recorded (PostgreSQL: a
// deferred constraint fails at COMMIT).
func TestCommitFailureRecordsNothing(t *testing.T) {
	forEachDriver(t, func(t *testing.T, e *env) {
		if e.dialect != "postgres" {
			t.Skip("deferred constraints are PostgreSQL-only")
		}
		e.exec(t, `ALTER TABLE orders ADD CONSTRAINT one_per_tenant UNIQUE (tenant) DEFERRABLE INITIALLY DEFERRED`)
		e.exec(t, `INSERT INTO orders (tenant, idem_key, exec, body) VALUES ('acme', 'seed', 0, '')`)
		a := &app{}
		h := e.handler(t, idemhttp.Config{}, a)
		w := do(h, req{tenant: "acme", key: "k", body: `{}`})
		wantProblem(t, w, http.StatusServiceUnavailable, idemhttp.TypeStoreUnavailable)
		if n := e.count(t, `SELECT count(*) FROM `+e.keys); n != 0 {
			t.Fatalf("%d key records after a failed commit, want 0", n)
		}
		e.exec(t, `DELETE FROM orders`)
		wantStatus(t, do(h, req{tenant: "acme", key: "k", body: `{}`}), 201)
	})
}

// A duplicate that waits longer than LockTimeout answers 409; with
// WaitForInFlight it waits and replays.
func TestInFlightDuplicate(t *testing.T) {
	forEachDriver(t, func(t *testing.T, e *env) {
		if e.dialect != "postgres" {
			t.Skip("SQLite serialises writers: a duplicate waits for the busy timeout instead")
		}
		entered, release := make(chan struct{}), make(chan struct{})
		var once sync.Once
		a := &app{hook: func(r *http.Request) int {
			once.Do(func() { close(entered); <-release })
			return 0
		}}
		h := e.handler(t, idemhttp.Config{LockTimeout: 30 * time.Millisecond}, a)
		done := make(chan *httptest.ResponseRecorder)
		go func() { done <- do(h, req{tenant: "acme", key: "slow", body: `{}`}) }()
		<-entered
		w := do(h, req{tenant: "acme", key: "slow", body: `{}`})
		wantProblem(t, w, http.StatusConflict, idemhttp.TypeInFlight)
		if w.Header().Get("Retry-After") != "1" {
			t.Fatalf("Retry-After %q", w.Header().Get("Retry-After"))
		}
		waiting := e.handler(t, idemhttp.Config{LockTimeout: 30 * time.Millisecond, WaitForInFlight: 10 * time.Second}, a)
		waited := make(chan *httptest.ResponseRecorder)
		go func() { waited <- do(waiting, req{tenant: "acme", key: "slow", body: `{}`}) }()
		time.Sleep(50 * time.Millisecond) // let it start waiting (not required for correctness)
		close(release)
		first := <-done
		wantStatus(t, first, 201)
		wantReplay(t, <-waited, first)
		if a.execs.Load() != 1 {
			t.Fatalf("handler ran %d times", a.execs.Load())
		}
	})
}

func TestNewValidatesConfig(t *testing.T) {
	d := testdb.SQLite(t)
	for _, cfg := range []idemhttp.Config{
		{Mode: 7}, {ExpiredPolicy: 9}, {Retention: -1}, {LockTimeout: -time.Second},
		{MaxBodyBytes: -1}, {OperationRetention: map[string]time.Duration{"x": 0}},
		{MaxResponseMemory: -1}, {MaxResponseBytes: -1}, {SpillDir: t.TempDir() + "/missing"},
	} {
		if _, err := idemhttp.New(d, cfg); !errors.Is(err, idem.ErrInvalidOption) {
			t.Errorf("New(%+v) = %v, want ErrInvalidOption", cfg, err)
		}
	}
}

func TestDefaultOperation(t *testing.T) {
	for _, c := range []struct{ method, pattern, path, want string }{
		{"POST", "POST /orders", "/orders", "POST /orders"},
		{"POST", "/orders/{id}", "/orders/7", "POST /orders/{id}"},
		{"PATCH", "", "/orders/7", "PATCH /orders/7"},
		{"POST", "example.com/x", "/x", "POST example.com/x"},
	} {
		r := httptest.NewRequest(c.method, c.path, nil)
		r.Pattern = c.pattern
		if got := idemhttp.DefaultOperation(r); got != c.want {
			t.Errorf("DefaultOperation(%s %q) = %q, want %q", c.method, c.pattern, got, c.want)
		}
	}
}

// On PostgreSQL the key insert bounds its wait with lock_timeout, and the
// handler's own statements run with the transaction's previous value.
func TestHandlerKeepsItsLockTimeout(t *testing.T) {
	forEachDriver(t, func(t *testing.T, e *env) {
		if e.dialect != "postgres" {
			t.Skip("lock_timeout is PostgreSQL-only")
		}
		var got string
		var err error
		a := &app{hook: func(r *http.Request) int {
			got, err = e.txString(r.Context(), `SHOW lock_timeout`)
			return 0
		}}
		h := e.handler(t, idemhttp.Config{LockTimeout: 123 * time.Millisecond}, a)
		wantStatus(t, do(h, req{tenant: "acme", key: "k", body: `{}`}), 201)
		if err != nil || got != "0" {
			t.Fatalf("handler saw lock_timeout %q (%v), want the session default 0", got, err)
		}
	})
}

// ExcludeFields leave volatile fields out of the fingerprint;
// FingerprintHeaders add request headers to it.
func TestFingerprintOptions(t *testing.T) {
	forEachDriver(t, func(t *testing.T, e *env) {
		a := &app{}
		h := e.handler(t, idemhttp.Config{ExcludeFields: []string{"meta.sent_at"}, FingerprintHeaders: []string{"api-version"}}, a)
		v1 := http.Header{"Api-Version": {"2026-01-01"}}
		first := do(h, req{tenant: "acme", key: "k", body: `{"qty":1,"meta":{"sent_at":"10:00"}}`, header: v1})
		wantStatus(t, first, 201)
		wantReplay(t, do(h, req{tenant: "acme", key: "k", body: `{"meta":{"sent_at":"10:05"},"qty":1}`, header: v1}), first)
		wantProblem(t, do(h, req{tenant: "acme", key: "k", body: `{"qty":1,"meta":{"sent_at":"10:00"}}`,
			header: http.Header{"Api-Version": {"2027-01-01"}}}), 422, idemhttp.TypeKeyReused)
		wantProblem(t, do(h, req{tenant: "acme", key: "k", body: `{"qty":2,"meta":{"sent_at":"10:00"}}`, header: v1}),
			422, idemhttp.TypeKeyReused)
		if a.execs.Load() != 1 {
			t.Fatalf("handler ran %d times", a.execs.Load())
		}
	})
}

// WithInfo lets an outer logging middleware see the key and whether the
// response was replayed.
func TestInfoForOuterMiddleware(t *testing.T) {
	forEachDriver(t, func(t *testing.T, e *env) {
		h := e.handler(t, idemhttp.Config{}, &app{})
		var infos []idemhttp.Info
		logged := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			ctx, info := idemhttp.WithInfo(r.Context())
			h.ServeHTTP(w, r.WithContext(ctx))
			infos = append(infos, *info)
		})
		do(logged, req{tenant: "acme", key: "k", body: `{}`})
		do(logged, req{tenant: "acme", key: "k", body: `{}`})
		want := []idemhttp.Info{
			{Key: "k", Tenant: "acme", Operation: op, Executed: true},
			{Key: "k", Tenant: "acme", Operation: op, Replayed: true},
		}
		if len(infos) != 2 || infos[0] != want[0] || infos[1] != want[1] {
			t.Fatalf("infos %+v, want %+v", infos, want)
		}
	})
}
