package idemhttp_test

import (
	"net/http"
	"strconv"
	"testing"

	"github.com/idemkit/idem/idemhttp"
	"github.com/idemkit/idem/internal/pgproxy"
	"github.com/idemkit/idem/internal/testdb"
)

// Config.NoSessionLock (transaction-pooling proxies): the handler runs on a
// transaction whose server session holds no advisory lock (the pipelined
// path holds the key's session lock there), and a new key costs the
// ordinary path's round trips; the request is recorded and its retry
// replayed as on the pipelined path, in one round trip.
func TestNoSessionLockPgx(t *testing.T) {
	for _, noLock := range []bool{false, true} {
		t.Run("NoSessionLock="+strconv.FormatBool(noLock), func(t *testing.T) {
			d, p := pgproxy.Pgx(t)
			e := newEnv(t, d)
			var locks string
			a := &app{hook: func(r *http.Request) int {
				var err error
				locks, err = e.txString(r.Context(), `SELECT count(*)::text FROM pg_locks WHERE locktype = 'advisory' AND pid = pg_backend_pid()`)
				if err != nil {
					locks = err.Error()
				}
				return 0
			}}
			h := e.handler(t, idemhttp.Config{NoSessionLock: noLock}, a)
			// Warm-up: the statements' first use prepares them.
			wantStatus(t, do(h, req{tenant: "acme", key: "warm", body: `{}`}), http.StatusCreated)

			p.Reset()
			first := do(h, req{tenant: "acme", key: "k", body: `{}`})
			wantStatus(t, first, http.StatusCreated)
			// Round trips: the pipelined path's three (lock+read,
			// BEGIN+INSERT, record+COMMIT+unlock) or the ordinary path's
			// four (read, BEGIN+claim, INSERT, completion+COMMIT), and
			// the hook's count of the locks.
			want, trips := "1", 3+1
			if noLock {
				want, trips = "0", 4+1
			}
			if locks != want {
				t.Fatalf("advisory locks held by the handler's session: %s, want %s", locks, want)
			}
			if n := p.RoundTrips(); n != trips {
				t.Fatalf("first request: %d round trips, want %d", n, trips)
			}
			p.Reset()
			wantReplay(t, do(h, req{tenant: "acme", key: "k", body: `{}`}), first)
			if n := p.RoundTrips(); n != 1 {
				t.Fatalf("replay: %d round trips, want 1", n)
			}
			if n := a.execs.Load(); n != 2 {
				t.Fatalf("%d executions, want 2 (warm-up and k)", n)
			}
		})
	}
}

// TestNoSessionLockOnAnOlderPartitionedLayoutPgx: on the partitioned
// layout a new record is inserted by a function of the database, which may
// be of another release than this binary (its functions are recreated only
// by idem migrate partition): one that still writes token 1 must not leave
// the ordinary path's completion fenced out (the key stuck in progress, its
// response never stored). The middleware reads the token back there.
func TestNoSessionLockOnAnOlderPartitionedLayoutPgx(t *testing.T) {
	d := testdb.PgxPartitioned(t)
	// The insert functions as an earlier release created them.
	testdb.Exec(t, d, `DO $$
DECLARE f record;
BEGIN
  FOR f IN SELECT p.oid FROM pg_proc p JOIN pg_namespace n ON n.oid = p.pronamespace
            WHERE n.nspname = '`+d.Names().Schema+`' AND p.proname IN ('keys_insert', 'keys_insert_locked') LOOP
    EXECUTE replace(pg_get_functiondef(f.oid), '''in_progress'', p_created, p_created', '''in_progress'', 1, p_created');
  END LOOP;
END $$`)
	e := newEnv(t, d)
	a := &app{}
	h := e.handler(t, idemhttp.Config{NoSessionLock: true}, a)
	first := do(h, req{tenant: "acme", key: "k", body: `{}`})
	wantStatus(t, first, http.StatusCreated)
	wantReplay(t, do(h, req{tenant: "acme", key: "k", body: `{}`}), first)
	rec, err := e.lookup("acme", op, "k")
	if err != nil || rec.State != idemhttp.StateCompleted || rec.Token != 1 {
		t.Fatalf("record %+v, %v; want completed with the older function's token 1", rec, err)
	}
	if n := a.execs.Load(); n != 1 {
		t.Fatalf("%d executions, want 1", n)
	}
}
