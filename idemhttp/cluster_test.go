package idemhttp_test

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/idemkit/idem/idemhttp"
	"github.com/idemkit/idem/internal/testdb"
	"github.com/idemkit/idem/store"
	"github.com/idemkit/idem/store/pgxstore"
)

// 1,000 keys × 4 concurrent duplicates across 2 http.Servers (each with its
// own pool, like two instances) sharing one PostgreSQL database → exactly
// 1,000 effects and zero 5xx.
func TestThousandKeysTwoServers(t *testing.T) {
	t.Parallel()
	conn, schema := testdb.PostgresSchema(t)
	newDriver := func() *pgxstore.Driver {
		cfg, err := pgxpool.ParseConfig(conn)
		if err != nil {
			t.Fatal(err)
		}
		cfg.MaxConns = 8
		pool, err := pgxpool.NewWithConfig(context.Background(), cfg)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(pool.Close)
		d, err := pgxstore.New(pool, pgxstore.Config{Names: store.Names{Schema: schema}})
		if err != nil {
			t.Fatal(err)
		}
		return d
	}
	d1, d2 := newDriver(), newDriver()
	testdb.MustMigrate(t, d1)
	testdb.Exec(t, d1, `CREATE TABLE orders (idem_key text NOT NULL, server text NOT NULL)`)

	var servers []*httptest.Server
	for i, d := range []*pgxstore.Driver{d1, d2} {
		mw, err := idemhttp.New(d, idemhttp.Config{Tenant: tenantHeader})
		if err != nil {
			t.Fatal(err)
		}
		name := fmt.Sprint("s", i)
		mux := http.NewServeMux()
		mux.Handle("POST /orders", mw.Handler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			tx, _ := idemhttp.Tx[pgx.Tx](r.Context())
			if _, err := tx.Exec(r.Context(), `INSERT INTO orders (idem_key, server) VALUES ($1, $2)`, idemhttp.Key(r.Context()), name); err != nil {
				http.Error(w, err.Error(), 500)
				return
			}
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(http.StatusCreated)
			fmt.Fprintf(w, `{"key":%q,"server":%q}`, idemhttp.Key(r.Context()), name)
		})))
		srv := httptest.NewServer(mux)
		t.Cleanup(srv.Close)
		servers = append(servers, srv)
	}
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 64}}
	t.Cleanup(client.CloseIdleConnections)

	const keys, dups, inFlight = 1000, 4, 16
	var fiveXX, conflicts, replays atomic.Int64
	var bad sync.Map // key → description of an inconsistent answer
	sem := make(chan struct{}, inFlight)
	var wg sync.WaitGroup
	for k := range keys {
		sem <- struct{}{}
		wg.Go(func() {
			defer func() { <-sem }()
			key := fmt.Sprintf("key-%04d", k)
			bodies := make([]string, dups)
			codes := make([]int, dups)
			var kw sync.WaitGroup
			for i := range dups {
				kw.Go(func() {
					r, _ := http.NewRequest("POST", servers[i%2].URL+"/orders", strings.NewReader(`{"n":`+fmt.Sprint(k)+`}`))
					r.Header.Set("Idempotency-Key", key)
					r.Header.Set("X-Tenant", "acme")
					r.Header.Set("Content-Type", "application/json")
					resp, err := client.Do(r)
					if err != nil {
						bad.Store(key, err.Error())
						return
					}
					b, _ := io.ReadAll(resp.Body)
					resp.Body.Close()
					codes[i], bodies[i] = resp.StatusCode, string(b)
					if resp.Header.Get(idemhttp.HeaderReplayed) == "true" {
						replays.Add(1)
					}
				})
			}
			kw.Wait()
			var want string
			for i, c := range codes {
				switch {
				case c >= 500:
					fiveXX.Add(1)
					bad.Store(key, fmt.Sprintf("%d %s", c, bodies[i]))
				case c == 409:
					conflicts.Add(1)
				case c == 201:
					if want == "" {
						want = bodies[i]
					} else if bodies[i] != want {
						bad.Store(key, "two different 201 bodies: "+want+" / "+bodies[i])
					}
				default:
					bad.Store(key, fmt.Sprintf("unexpected %d %s", c, bodies[i]))
				}
			}
		})
	}
	wg.Wait()
	bad.Range(func(k, v any) bool { t.Errorf("%s: %s", k, v); return true })
	if fiveXX.Load() != 0 {
		t.Fatalf("%d 5xx responses, want 0", fiveXX.Load())
	}
	if n := testdb.Count(t, d1, `SELECT count(*) FROM orders`); n != keys {
		t.Fatalf("%d effects, want exactly %d", n, keys)
	}
	if n := testdb.Count(t, d1, `SELECT count(DISTINCT idem_key) FROM orders`); n != keys {
		t.Fatalf("%d distinct keys with effects, want %d", n, keys)
	}
	if n := testdb.Count(t, d1, `SELECT count(*) FROM `+d1.Table("idempotency_keys")+` WHERE state = 'completed'`); n != keys {
		t.Fatalf("%d completed records, want %d", n, keys)
	}
	t.Logf("%d requests: %d replays, %d answered 409", keys*dups, replays.Load(), conflicts.Load())
}
