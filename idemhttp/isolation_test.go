package idemhttp_test

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/idemkit/idem/idemhttp"
	"github.com/idemkit/idem/internal/testdb"
	"github.com/idemkit/idem/store"
	"github.com/idemkit/idem/store/pgxstore"
)

// Sessions whose transactions default to REPEATABLE READ or SERIALIZABLE
// (default_transaction_isolation, here as a connection parameter): the
// pipelined path's LockKey reads the record again after waiting for the
// key's lock, which only sees what the previous holder committed under
// READ COMMITTED. A duplicate queued behind the first request must still
// replay its response once it completes: the handler runs once.
func TestDuplicateReplaysUnderDefaultIsolationPgx(t *testing.T) {
	for _, level := range []string{"repeatable read", "serializable"} {
		t.Run(strings.ReplaceAll(level, " ", "-"), func(t *testing.T) {
			conn, schema := testdb.PostgresSchema(t)
			cfg, err := pgxpool.ParseConfig(conn)
			if err != nil {
				t.Fatal(err)
			}
			cfg.ConnConfig.RuntimeParams["default_transaction_isolation"] = level
			pool, err := pgxpool.NewWithConfig(context.Background(), cfg)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(pool.Close)
			d, err := pgxstore.New(pool, pgxstore.Config{Names: store.Names{Schema: schema}})
			if err != nil {
				t.Fatal(err)
			}
			testdb.MustMigrate(t, d)
			var got string
			if err := pool.QueryRow(context.Background(), `SELECT current_setting('transaction_isolation')`).Scan(&got); err != nil || got != level {
				t.Fatalf("the pool's transactions run %q (%v), want %q", got, err, level)
			}

			// LockTimeout bounds the duplicate's wait; the test lets the
			// first request finish as soon as the duplicate waits.
			mw, err := idemhttp.New(d, idemhttp.Config{LockTimeout: time.Minute})
			if err != nil {
				t.Fatal(err)
			}
			var execs atomic.Int64
			started, release := make(chan struct{}), make(chan struct{})
			h := mw.Handler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				n := execs.Add(1)
				if n == 1 {
					close(started)
					<-release
				}
				w.WriteHeader(http.StatusCreated)
				fmt.Fprintf(w, "execution %d", n)
			}))
			q := req{tenant: "acme", key: "iso-" + strings.ReplaceAll(level, " ", "-"), body: `{}`}
			var wa, wb *httptest.ResponseRecorder
			aDone, bDone := make(chan struct{}), make(chan struct{})
			go func() { defer close(aDone); wa = do(h, q) }()
			select {
			case <-started:
			case <-aDone:
				t.Fatalf("the first request did not run the handler: %d %s", wa.Code, wa.Body.String())
			}
			go func() { defer close(bDone); wb = do(h, q) }()
			waitForWaiter(t, pool, schema, &execs, bDone)
			close(release)
			<-aDone
			<-bDone

			if n := execs.Load(); n != 1 {
				t.Fatalf("the handler ran %d times for one key, want 1", n)
			}
			wantStatus(t, wa, http.StatusCreated)
			wantReplay(t, wb, wa)
		})
	}
}

// waitForWaiter returns once a session of the test's schema waits on a
// lock (the duplicate queued behind the first request: on the key's
// advisory lock, or on its row), or once the handler ran a second time,
// the defect the caller's count then reports. The duplicate finishing
// first fails the test: it cannot while the first request holds the key.
func waitForWaiter(t *testing.T, pool *pgxpool.Pool, schema string, execs *atomic.Int64, bDone <-chan struct{}) {
	t.Helper()
	give := time.Now().Add(time.Minute) // a bound against hanging, not a measurement
	for {
		if execs.Load() > 1 {
			return
		}
		select {
		case <-bDone:
			t.Fatal("the duplicate finished while the first request held the key")
		default:
		}
		var n int
		err := pool.QueryRow(context.Background(), `SELECT count(*) FROM pg_stat_activity
			WHERE wait_event_type = 'Lock' AND datname = current_database() AND position($1 IN query) > 0`, schema).Scan(&n)
		if err != nil {
			t.Fatal(err)
		}
		if n > 0 {
			return
		}
		if time.Now().After(give) {
			t.Fatal("the duplicate neither waits on a lock nor ran the handler")
		}
		time.Sleep(5 * time.Millisecond)
	}
}
