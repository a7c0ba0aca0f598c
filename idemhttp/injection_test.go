package idemhttp_test

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/idemhttp"
	"github.com/idemkit/idem/inbox"
	"github.com/idemkit/idem/internal/pgproxy"
	"github.com/idemkit/idem/internal/testdb"
	"github.com/idemkit/idem/store/pgxstore"
)

// injectionKey is a valid Idempotency-Key (visible ASCII, no quote) that
// closes a string literal when backslashes are escapes
// (standard_conforming_strings = off) and would then commit the request
// transaction, drop a table and comment out the rest of the statement.
const injectionKey = `x\';COMMIT;DROP/**/TABLE/**/victim;--`

// injectionDriver returns a migrated pgx driver with a table "victim" in a
// fresh schema, on one connection. With sessionOff the connection starts
// with standard_conforming_strings = off.
func injectionDriver(t *testing.T, sessionOff bool) *pgxstore.Driver {
	t.Helper()
	d, _ := pgproxy.Pgx(t, func(cfg *pgxpool.Config) {
		if sessionOff {
			cfg.ConnConfig.RuntimeParams["standard_conforming_strings"] = "off"
		}
	})
	testdb.Exec(t, d, `CREATE TABLE victim (x integer)`)
	if sessionOff {
		var scs string
		if err := d.PgxPool().QueryRow(context.Background(), `SHOW standard_conforming_strings`).Scan(&scs); err != nil || scs != "off" {
			t.Fatalf("standard_conforming_strings = %q (%v), want off for this case", scs, err)
		}
	}
	return d
}

// requireVictim fails t when the table "victim" is gone.
func requireVictim(t *testing.T, d *pgxstore.Driver) {
	t.Helper()
	if n := testdb.Count(t, d, `SELECT count(*) FROM pg_tables WHERE schemaname = current_schema() AND tablename = 'victim'`); n != 1 {
		t.Fatal("table victim was dropped: a value was executed as SQL")
	}
}

// A handler that turns standard_conforming_strings off (for its
// transaction, for the session, or on a connection that started with it
// off) cannot make a hostile key run as SQL: the table survives, the key is
// stored verbatim and completed, and the retry replays.
func TestInjectionIdempotencyKeyPgx(t *testing.T) {
	cases := []struct {
		name       string
		sessionOff bool   // the pool's connections start with it off
		set        string // what the handler runs on the request transaction
	}{
		{name: "set-local", set: `SET LOCAL standard_conforming_strings = off`},
		{name: "set-session", set: `SET standard_conforming_strings = off`},
		{name: "connection-starts-off", sessionOff: true, set: `SELECT 1`},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			d := injectionDriver(t, tc.sessionOff)
			mw, err := idemhttp.New(d, idemhttp.Config{
				Tenant:    func(*http.Request) (string, error) { return "t1", nil },
				Operation: func(*http.Request) string { return "charge" },
			})
			if err != nil {
				t.Fatal(err)
			}
			var execs int
			h := mw.Handler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				tx, ok := idemhttp.Tx[pgx.Tx](r.Context())
				if !ok {
					http.Error(w, "no transaction", http.StatusInternalServerError)
					return
				}
				if _, err := tx.Exec(r.Context(), tc.set); err != nil {
					http.Error(w, err.Error(), http.StatusInternalServerError)
					return
				}
				execs++
				w.WriteHeader(http.StatusCreated)
				_, _ = w.Write([]byte(`{"charged":true}`))
			}))
			send := func() *httptest.ResponseRecorder {
				r := httptest.NewRequest(http.MethodPost, "/charge", strings.NewReader(`{"amount":1}`))
				r.Header.Set("Content-Type", "application/json")
				r.Header.Set(idemhttp.HeaderKey, injectionKey)
				w := httptest.NewRecorder()
				h.ServeHTTP(w, r)
				return w
			}
			first := send()
			requireVictim(t, d)
			if first.Code != http.StatusCreated {
				t.Fatalf("first request: %d %s", first.Code, first.Body)
			}
			keys := d.Table("idempotency_keys")
			if n := testdb.Count(t, d, `SELECT count(*) FROM `+keys); n != 1 {
				t.Fatalf("%d stored keys, want 1", n)
			}
			if n := testdb.Count(t, d, `SELECT count(*) FROM `+keys+` WHERE idem_key = $1 AND state = 'completed'`, injectionKey); n != 1 {
				t.Fatal("the key was not stored verbatim and completed")
			}
			again := send()
			requireVictim(t, d)
			if again.Code != http.StatusCreated || again.Header().Get(idemhttp.HeaderReplayed) != "true" || execs != 1 {
				t.Fatalf("retry: %d replayed=%q execs=%d, want a replay of the 201", again.Code, again.Header().Get(idemhttp.HeaderReplayed), execs)
			}
		})
	}
}

// The inbox's one-round-trip first delivery takes a hostile message id (and
// consumer name) as values whatever the handler does to
// standard_conforming_strings, on this message or the previous one on the
// same connection.
func TestInjectionInboxMessageIDPgx(t *testing.T) {
	for _, sessionOff := range []bool{false, true} {
		name := "connection-starts-on"
		if sessionOff {
			name = "connection-starts-off"
		}
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			d := injectionDriver(t, sessionOff)
			in, err := inbox.New(d, inbox.Config{})
			if err != nil {
				t.Fatal(err)
			}
			consumer := `c\';COMMIT;DROP/**/TABLE/**/victim;--`
			sets := []string{
				`SET LOCAL standard_conforming_strings = off`,
				`SET standard_conforming_strings = off`,
				`SELECT 1`, // the next message, on the session left with it off (one connection)
			}
			for i, set := range sets {
				id := injectionKey + strings.Repeat("'", i)
				res, err := in.Process(context.Background(), consumer, idem.Message{ID: id, Attempt: 1, Payload: []byte(`{}`)},
					func(ctx context.Context, tx pgx.Tx, msg idem.Message) error {
						if msg.ID != id {
							return errors.New("message id changed on the way")
						}
						_, err := tx.Exec(ctx, set)
						return err
					})
				requireVictim(t, d)
				if err != nil || res != inbox.Processed {
					t.Fatalf("%s: %v %v", set, res, err)
				}
				if n := testdb.Count(t, d, `SELECT count(*) FROM `+d.Table("inbox")+` WHERE consumer = $1 AND message_id = $2`, consumer, id); n != 1 {
					t.Fatalf("%s: message id not stored verbatim", set)
				}
			}
			if n := testdb.Count(t, d, `SELECT count(*) FROM `+d.Table("inbox")); n != len(sets) {
				t.Fatalf("%d inbox rows, want %d", n, len(sets))
			}
		})
	}
}

// A first request with a new key on PostgreSQL costs as many round trips
// as when the driver rendered values as literals, and sends its values as
// bound parameters only.
func TestRoundTripsFirstRequestPgx(t *testing.T) {
	d, p := pgproxy.Pgx(t)
	testdb.Exec(t, d, `CREATE TABLE charges (k text NOT NULL)`)
	mw, err := idemhttp.New(d, idemhttp.Config{
		Tenant:    func(*http.Request) (string, error) { return "t1", nil },
		Operation: func(*http.Request) string { return "charge" },
	})
	if err != nil {
		t.Fatal(err)
	}
	h := mw.Handler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		tx, _ := idemhttp.Tx[pgx.Tx](r.Context())
		if _, err := tx.Exec(r.Context(), `INSERT INTO charges (k) VALUES ($1)`, idemhttp.Key(r.Context())); err != nil {
			http.Error(w, err.Error(), http.StatusInternalServerError)
			return
		}
		w.WriteHeader(http.StatusCreated)
	}))
	for i, key := range []string{"warm-up", injectionKey, `it's-\-a-key`} {
		p.Reset()
		r := httptest.NewRequest(http.MethodPost, "/charge", strings.NewReader(`{"amount":1}`))
		r.Header.Set("Content-Type", "application/json")
		r.Header.Set(idemhttp.HeaderKey, key)
		w := httptest.NewRecorder()
		h.ServeHTTP(w, r)
		if w.Code != http.StatusCreated {
			t.Fatalf("%q: %d %s", key, w.Code, w.Body)
		}
		if i == 0 {
			continue // the first request on the connection prepares the statements
		}
		// 4 before the pipelined path (the read of an existing record,
		// BEGIN+INSERT, the handler's INSERT, UPDATE+COMMIT); now 3, the
		// plain handler's: lock+read, BEGIN+the handler's INSERT, the
		// completed record+COMMIT+unlock.
		if n := p.RoundTrips(); n != 3 {
			t.Fatalf("%q: %d round trips, want 3", key, n)
		}
		for _, m := range p.Sent() {
			if m.Type == 'Q' || m.Type == 'P' {
				t.Errorf("%q: SQL text sent (%q): want prepared statements only", key, m.SQL())
			}
			if m.Type != 'B' && strings.Contains(string(m.Body), key) {
				t.Errorf("%q: the key was sent inside a %q message", key, m.Type)
			}
		}
	}
	if n := testdb.Count(t, d, `SELECT count(*) FROM charges`); n != 3 {
		t.Fatalf("%d charges, want 3", n)
	}
}
