package idemhttp_test

import (
	"net/http"
	"sync"
	"testing"

	"github.com/idemkit/idem/idemhttp"
	"github.com/idemkit/idem/internal/testdb"
)

// On SQLite a request with a new key writes its record once: one INSERT of
// the completed record, no in_progress claim updated afterwards. Triggers
// on the keys table log every write the database sees.
func TestSerialisedOneWriteSQLite(t *testing.T) {
	d := testdb.SQLite(t)
	e := newEnv(t, d)
	e.exec(t, `CREATE TABLE key_writes (op text NOT NULL, state text NOT NULL)`)
	e.exec(t, `CREATE TRIGGER key_ins AFTER INSERT ON `+e.keys+` BEGIN INSERT INTO key_writes VALUES ('insert', NEW.state); END`)
	e.exec(t, `CREATE TRIGGER key_upd AFTER UPDATE ON `+e.keys+` BEGIN INSERT INTO key_writes VALUES ('update', NEW.state); END`)
	a := &app{}
	h := e.handler(t, idemhttp.Config{}, a)
	first := do(h, req{tenant: "acme", key: "k1", body: `{"qty":1}`})
	wantStatus(t, first, 201)
	wantReplay(t, do(h, req{tenant: "acme", key: "k1", body: `{"qty":1}`}), first)
	wantProblem(t, do(h, req{tenant: "acme", key: "k1", body: `{"qty":2}`}), 422, idemhttp.TypeKeyReused)
	if n := e.count(t, `SELECT count(*) FROM key_writes`); n != 1 {
		t.Fatalf("%d writes of the key record, want 1", n)
	}
	if n := e.count(t, `SELECT count(*) FROM key_writes WHERE op = 'insert' AND state = 'completed'`); n != 1 {
		t.Fatal("the one write is not an INSERT of the completed record")
	}
	rec, err := e.lookup("acme", "POST /orders", "k1")
	if err != nil {
		t.Fatal(err)
	}
	if rec.State != idemhttp.StateCompleted || rec.Token != rec.CreatedAt.UnixMicro() || rec.Status != 201 {
		t.Fatalf("record %+v, want completed, token its creation time, status 201", rec)
	}
	if a.execs.Load() != 1 {
		t.Fatalf("%d executions, want 1", a.execs.Load())
	}
}

// Concurrent duplicates on SQLite, real goroutines on the real database:
// the handler runs once per key, every other request replays it, and a
// handler that fails records nothing.
func TestSerialisedConcurrentSQLite(t *testing.T) {
	d := testdb.SQLite(t)
	e := newEnv(t, d)
	a := &app{hook: func(r *http.Request) int {
		if r.Header.Get("Idempotency-Key") == "fails" {
			return http.StatusInternalServerError
		}
		return 0
	}}
	h := e.handler(t, idemhttp.Config{}, a)
	const keys, dups = 4, 8
	var wg sync.WaitGroup
	results := make([][]int, keys)
	bodies := make([][]string, keys)
	for k := range keys {
		results[k] = make([]int, dups)
		bodies[k] = make([]string, dups)
		for i := range dups {
			wg.Go(func() {
				w := do(h, req{tenant: "acme", key: string(rune('a' + k)), body: `{}`})
				results[k][i], bodies[k][i] = w.Code, w.Body.String()
			})
		}
	}
	wg.Wait()
	for k := range keys {
		for i := range dups {
			if results[k][i] != 201 || bodies[k][i] != bodies[k][0] {
				t.Fatalf("key %d request %d: %d %q, want 201 and the first's body %q", k, i, results[k][i], bodies[k][i], bodies[k][0])
			}
		}
	}
	if n := a.execs.Load(); n != keys {
		t.Fatalf("%d executions, want %d (one per key)", n, keys)
	}
	if n := e.count(t, `SELECT count(*) FROM orders`); n != keys {
		t.Fatalf("%d orders, want %d", n, keys)
	}
	wantStatus(t, do(h, req{tenant: "acme", key: "fails", body: `{}`}), 500)
	if n := e.count(t, `SELECT count(*) FROM `+e.keys+` WHERE idem_key = 'fails'`); n != 0 {
		t.Fatal("a 500 was recorded")
	}
	if n := e.count(t, `SELECT count(*) FROM orders WHERE idem_key = 'fails'`); n != 0 {
		t.Fatal("the failed handler's work committed")
	}
}
