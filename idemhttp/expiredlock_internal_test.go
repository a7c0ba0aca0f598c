package idemhttp

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/idemkit/idem/internal/testdb"
	"github.com/idemkit/idem/store"
	"github.com/idemkit/idem/store/pgxstore"
)

// A record the reserved path read as expired goes to the ordinary path
// (attemptTx); if it is deleted meanwhile (idem gc, Forget), the ordinary
// path's claim inserts a record that stays uncommitted while its handler
// runs, and LockKey's read cannot see it. The ordinary path takes the
// key's lock for its transaction, so the reserved path and it exclude each
// other, whichever starts first: the handler runs once, and the other
// request waits for its record and replays it.
//
// Driven with real requests on PostgreSQL: A reaches attemptTx as serve
// sends it there (attemptReserved reads the expired record, then it is
// forgotten), B goes through serve; the first handler blocks until the
// other request is seen waiting on the key's lock (or, without the lock,
// has run the handler a second time).
func TestExpiredRecordOrdinaryPathTakesKeyLockPgx(t *testing.T) {
	for _, tc := range []struct {
		ordinaryFirst, declined bool
	}{{true, false}, {false, false}, {true, true}, {false, true}} {
		ordinaryFirst := tc.ordinaryFirst
		name := map[bool]string{true: "ordinary-first", false: "reserved-first"}[ordinaryFirst]
		if tc.declined {
			// The driver declines the one-round-trip BEGIN (as after a
			// dropped prepared statement): BEGIN, then the lock.
			name += "/begin-insert-declined"
		}
		t.Run(name, func(t *testing.T) {
			d := testdb.Pgx(t)
			ctx := context.Background()
			var drv store.Driver[pgx.Tx] = d
			if tc.declined {
				drv = decliningBeginInsert{d}
			}
			// LockTimeout bounds the wait of the request that queues;
			// the test releases the first handler as soon as it sees
			// the wait, long before.
			m, err := New(drv, Config{LockTimeout: time.Minute})
			if err != nil {
				t.Fatal(err)
			}
			if !m.reserved() {
				t.Fatal("the reserved path does not apply on pgx")
			}
			const op, key = "POST /orders", "expired-then-gone"
			testdb.Exec(t, d, `INSERT INTO `+d.Table("idempotency_keys")+` (tenant, operation, idem_key, fingerprint, state, token, status, created_at, locked_until, completed_at, expires_at)
				VALUES ('', $1, $2, decode(repeat('00', 32), 'hex'), 'completed', 1, 201, 1, 0, 1, 2)`, op, key)

			var execs atomic.Int64
			var handlerLockTimeout atomic.Value
			started, release := make(chan struct{}), make(chan struct{})
			h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				n := execs.Add(1)
				if tx, ok := Tx[pgx.Tx](r.Context()); ok {
					var lt string
					if err := tx.QueryRow(r.Context(), `SELECT current_setting('lock_timeout')`).Scan(&lt); err != nil {
						lt = err.Error()
					}
					handlerLockTimeout.Store(lt)
				}
				if n == 1 {
					close(started)
					<-release
				}
				w.WriteHeader(http.StatusCreated)
				fmt.Fprintf(w, "execution %d", n)
			})
			newReq := func() *http.Request {
				r := httptest.NewRequest(http.MethodPost, "/orders", bytes.NewReader([]byte(`{}`)))
				r.Header.Set(HeaderKey, key)
				r.Header.Set("Content-Type", "application/json")
				return r
			}

			// A: the reserved path reads the expired record and leaves
			// it to the ordinary path; then the record is deleted.
			wa := httptest.NewRecorder()
			ra, reqA := prepareRequest(m, newReq(), key)
			if out, _, err := m.attemptReserved(wa, ra, h, reqA); out != outExecute || err != nil {
				t.Fatalf("reserved path on an expired record: outcome %d, %v; want outExecute", out, err)
			}
			if err := Forget(ctx, d, "", op, key); err != nil {
				t.Fatal(err)
			}
			type result struct {
				out outcome
				err error
			}
			aDone := make(chan result, 1)
			runA := func() {
				out, _, err := m.attemptTx(wa, ra, h, reqA)
				aDone <- result{out, err}
			}
			wb := httptest.NewRecorder()
			bDone := make(chan struct{})
			runB := func() {
				defer close(bDone)
				m.Handler(h).ServeHTTP(wb, newReq())
			}
			if ordinaryFirst {
				go runA()
				<-started
				go runB()
			} else {
				go runB()
				<-started
				go runA()
			}
			// The second request either queues on the key's lock or
			// (the defect) runs the handler itself; it must not finish
			// while the first holds the key.
			waitForLockWaiter(t, d, lockKey(reqA.scope), &execs, bDone, aDone)
			close(release)
			a := <-aDone
			<-bDone

			if n := execs.Load(); n != 1 {
				t.Fatalf("the handler ran %d times for one key, want 1", n)
			}
			// The key's lock is bounded by LockTimeout, the handler's
			// statements are not: they see the session's own setting.
			if lt := handlerLockTimeout.Load(); lt != "0" {
				t.Errorf("the handler ran with lock_timeout %v, want the session's 0", lt)
			}
			if ordinaryFirst {
				if a.out != outDone || a.err != nil || wa.Code != http.StatusCreated {
					t.Fatalf("A (ordinary path): outcome %d, %v, status %d; want executed, 201", a.out, a.err, wa.Code)
				}
				if wb.Code != http.StatusCreated || wb.Header().Get(HeaderReplayed) != "true" || wb.Body.String() != wa.Body.String() {
					t.Fatalf("B: %d %q replayed %q; want A's response replayed", wb.Code, wb.Body.String(), wb.Header().Get(HeaderReplayed))
				}
			} else {
				if wb.Code != http.StatusCreated || wb.Header().Get(HeaderReplayed) != "" {
					t.Fatalf("B (reserved path): %d %q replayed %q; want executed, 201", wb.Code, wb.Body.String(), wb.Header().Get(HeaderReplayed))
				}
				if a.out != outReplay || a.err != nil {
					t.Fatalf("A (ordinary path) after B: outcome %d, %v; want outReplay", a.out, a.err)
				}
			}
		})
	}
}

// The ordinary path's wait for the key's lock is bounded by
// Config.LockTimeout: while a request on the reserved path holds the key,
// attemptTx gives up with store.ErrLockTimeout (409 in flight) without
// running the handler.
func TestOrdinaryPathKeyLockTimesOutPgx(t *testing.T) {
	d := testdb.Pgx(t)
	const key = "held-by-reserved"
	m, err := New(d, Config{})
	if err != nil {
		t.Fatal(err)
	}
	short, err := New(d, Config{LockTimeout: time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	var execs atomic.Int64
	started, release := make(chan struct{}), make(chan struct{})
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if execs.Add(1) == 1 {
			close(started)
			<-release
		}
		w.WriteHeader(http.StatusCreated)
	})
	newReq := func() *http.Request {
		r := httptest.NewRequest(http.MethodPost, "/orders", bytes.NewReader([]byte(`{}`)))
		r.Header.Set(HeaderKey, key)
		r.Header.Set("Content-Type", "application/json")
		return r
	}
	wb := httptest.NewRecorder()
	bDone := make(chan struct{})
	go func() {
		defer close(bDone)
		m.Handler(h).ServeHTTP(wb, newReq())
	}()
	<-started
	// As serve does: the reserved path, which asks the pool's isolation
	// first, and then the ordinary one.
	if !short.readCommitted(context.Background()) {
		t.Fatal("the pool's sessions are read committed, the middleware says not")
	}
	ra, reqA := prepareRequest(short, newReq(), key)
	out, _, err := short.attemptTx(httptest.NewRecorder(), ra, h, reqA)
	close(release)
	<-bDone
	if out != outInFlight || !errors.Is(err, store.ErrLockTimeout) {
		t.Fatalf("attemptTx while the reserved path holds the key: outcome %d, %v; want outInFlight, store.ErrLockTimeout", out, err)
	}
	if n := execs.Load(); n != 1 || wb.Code != http.StatusCreated {
		t.Fatalf("the handler ran %d times (want 1); the holder answered %d (want 201)", n, wb.Code)
	}
}

// prepareRequest builds what serveKeyed builds for r before its attempts:
// the request's scope (shared tenant, default operation), fingerprint and
// context.
func prepareRequest[TTx any](m *Middleware[TTx], r *http.Request, key string) (*http.Request, *request) {
	body, _ := io.ReadAll(r.Body)
	op := m.cfg.Operation(r)
	req := &request{scope: scope{"", op, key}, boxed: [3]any{"", op, key}}
	req.stateRoom.tenant, req.stateRoom.operation, req.stateRoom.key = "", op, key
	req.state = &req.stateRoom
	req.fp = m.fingerprint(r, op, body)
	r = r.WithContext(context.WithValue(r.Context(), ctxKey{}, req.state))
	r.Body = io.NopCloser(bytes.NewReader(body))
	return r, req
}

// waitForLockWaiter returns once a session waits for the advisory lock lk
// (pg_locks: a bigint key is classid, the high half, and objid, the low
// half, objsubid 1), or once the handler ran a second time, the defect
// (the caller's count then fails the test). A request finishing first
// fails the test: it cannot while the first handler holds the key.
func waitForLockWaiter[R any](t *testing.T, d *pgxstore.Driver, lk int64, execs *atomic.Int64, bDone <-chan struct{}, aDone <-chan R) {
	t.Helper()
	u := uint64(lk)
	const waiters = `SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND NOT granted
		AND classid::bigint = $1 AND objid::bigint = $2 AND objsubid = 1`
	give := time.Now().Add(time.Minute) // a bound against hanging, not a measurement
	for {
		if execs.Load() > 1 {
			return
		}
		select {
		case <-bDone:
			t.Fatal("B finished while the first handler held the key")
		default:
		}
		if len(aDone) > 0 {
			t.Fatal("A finished while the first handler held the key")
		}
		var n int
		if err := d.PgxPool().QueryRow(context.Background(), waiters, int64(u>>32), int64(uint32(u))).Scan(&n); err != nil {
			t.Fatal(err)
		}
		if n > 0 {
			return
		}
		if time.Now().After(give) {
			t.Fatal("no request waits on the key's lock and the handler ran once: the second request is stuck elsewhere")
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// decliningBeginInsert is a driver whose BeginInsert declines, as pgx's
// does when a statement it had prepared was dropped meanwhile.
type decliningBeginInsert struct{ store.Driver[pgx.Tx] }

func (decliningBeginInsert) BeginInsert(context.Context, string, ...any) (tx pgx.Tx, inserted, ok bool, err error) {
	return nil, false, false, nil
}
