package idemhttp_test

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/idemkit/idem/idemhttp"
	"github.com/idemkit/idem/internal/testdb"
	"github.com/idemkit/idem/store/pgxstore"
)

// The benchmarks compare the same handler (one INSERT) on PostgreSQL with
// and without the middleware, and the replay path. Without the middleware
// the handler's INSERT autocommits on the pool; with it, the INSERT runs on
// the request transaction next to the key record. Ratios to report:
// Plain ns/op ÷ Idempotent ns/op (throughput ratio, target ≥ 0.75; also
// against PlainTx, the handler in its own transaction) and
// Idempotent ns/op ÷ Replay ns/op (target ≥ 2), for each of the serial and
// parallel sub-benchmarks.
//
//	IDEM_TEST_POSTGRES_URL=… go test -run '^$' -bench BenchmarkHandler -benchtime 3s ./idemhttp

// benchSetup returns a driver and the handler. Without the middleware the
// handler's INSERT autocommits, or runs in its own transaction when ownTx.
func benchSetup(b *testing.B, ownTx bool) (*pgxstore.Driver, http.Handler) {
	d := testdb.Pgx(b)
	testdb.Exec(b, d, `CREATE TABLE orders (idem_key text NOT NULL, body text NOT NULL)`)
	return d, ratioHandler(d, ownTx)
}

// ratioHandler is the benchmarked handler: one INSERT, on the middleware's
// transaction when there is one, else autocommit or (ownTx) in its own
// transaction.
func ratioHandler(d *pgxstore.Driver, ownTx bool) http.Handler {
	pool := d.PgxPool()
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		ctx := r.Context()
		const q = `INSERT INTO orders (idem_key, body) VALUES ($1, $2)`
		var err error
		switch tx, ok := idemhttp.Tx[pgx.Tx](ctx); {
		case ok:
			_, err = tx.Exec(ctx, q, idemhttp.Key(ctx), "x")
		case ownTx:
			err = pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
				_, err := tx.Exec(ctx, q, "", "x")
				return err
			})
		default:
			_, err = pool.Exec(ctx, q, "", "x")
		}
		writeOrder(w, err)
	})
}

// writeOrder is the benchmarked handlers' response: 201 with a small JSON
// body and a Location, or 500 when the INSERT failed.
func writeOrder(w http.ResponseWriter, err error) {
	if err != nil {
		http.Error(w, err.Error(), 500)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Location", "/orders/1")
	w.WriteHeader(http.StatusCreated)
	_, _ = w.Write([]byte(`{"id":1,"item":"ticket","qty":2}`))
}

func benchRequest(key string) *http.Request {
	r := httptest.NewRequest(http.MethodPost, "/orders", strings.NewReader(`{"item":"ticket","qty":2}`))
	r.Header.Set("Content-Type", "application/json")
	if key != "" {
		r.Header.Set("Idempotency-Key", key)
	}
	return r
}

// runBench measures h serially ("serial": latency-bound, one request at a
// time) and with 8 concurrent clients ("parallel": throughput of a loaded
// server, where PostgreSQL groups commits).
func runBench(b *testing.B, h http.Handler, key func(i int64) string) {
	serve := func(b *testing.B, k string) {
		w := httptest.NewRecorder()
		h.ServeHTTP(w, benchRequest(k))
		if w.Code != http.StatusCreated {
			b.Fatalf("status %d: %s", w.Code, w.Body.String())
		}
	}
	var n atomic.Int64
	b.Run("serial", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			serve(b, key(n.Add(1)))
		}
	})
	b.Run("parallel", func(b *testing.B) {
		b.ReportAllocs()
		b.SetParallelism(4)
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				serve(b, key(n.Add(1)))
			}
		})
	})
}

func BenchmarkHandlerPlain(b *testing.B) {
	_, h := benchSetup(b, false)
	runBench(b, h, func(int64) string { return "" })
}

// BenchmarkHandlerPlainTx is the plain handler doing its INSERT in its own
// BEGIN/COMMIT, the same unit of work the middleware gives it.
func BenchmarkHandlerPlainTx(b *testing.B) {
	_, h := benchSetup(b, true)
	runBench(b, h, func(int64) string { return "" })
}

func BenchmarkHandlerIdempotent(b *testing.B) {
	d, h := benchSetup(b, false)
	mw, err := idemhttp.New(d, idemhttp.Config{})
	if err != nil {
		b.Fatal(err)
	}
	runBench(b, mw.Handler(h), func(i int64) string { return fmt.Sprint("bench-", i) })
}

func BenchmarkHandlerReplay(b *testing.B) {
	d, h := benchSetup(b, false)
	mw, err := idemhttp.New(d, idemhttp.Config{})
	if err != nil {
		b.Fatal(err)
	}
	wrapped := mw.Handler(h)
	w := httptest.NewRecorder()
	wrapped.ServeHTTP(w, benchRequest("replayed"))
	if w.Code != http.StatusCreated {
		b.Fatal(w.Code)
	}
	runBench(b, wrapped, func(int64) string { return "replayed" })
	if n := testdb.Count(b, d, `SELECT count(*) FROM orders`); n != 1 {
		b.Fatalf("%d effects after replays, want 1", n)
	}
}

// TestHandlerRatios measures the same ratios as the benchmarks, but
// interleaved (rounds of plain, plain-tx, idempotent and replay requests,
// median per-op time over the rounds), so load from other processes hits
// every variant alike. It only runs when IDEM_BENCH_RATIOS=1:
//
//	IDEM_BENCH_RATIOS=1 IDEM_TEST_POSTGRES_URL=… go test -run TestHandlerRatios -v ./idemhttp
func TestHandlerRatios(t *testing.T) {
	if os.Getenv("IDEM_BENCH_RATIOS") != "1" {
		t.Skip("set IDEM_BENCH_RATIOS=1 to measure")
	}
	d := testdb.Pgx(t)
	testdb.Exec(t, d, `CREATE TABLE orders (idem_key text NOT NULL, body text NOT NULL)`)
	plain, plainTx := ratioHandler(d, false), ratioHandler(d, true)
	mw, err := idemhttp.New(d, idemhttp.Config{})
	if err != nil {
		t.Fatal(err)
	}
	idem := mw.Handler(plain)
	const rounds, per = 15, 200
	variants := []struct {
		name string
		h    http.Handler
		key  func(r, i int) string
	}{
		{"plain", plain, func(int, int) string { return "" }},
		{"plain-tx", plainTx, func(int, int) string { return "" }},
		{"idempotent", idem, func(r, i int) string { return fmt.Sprint("ratio-", r, "-", i) }},
		{"replay", idem, func(int, int) string { return "ratio-0-0" }},
	}
	times := make([][]time.Duration, len(variants))
	for r := range rounds {
		for v, vr := range variants {
			start := time.Now()
			for i := range per {
				w := httptest.NewRecorder()
				vr.h.ServeHTTP(w, benchRequest(vr.key(r, i)))
				if w.Code != http.StatusCreated {
					t.Fatalf("%s: %d %s", vr.name, w.Code, w.Body.String())
				}
			}
			times[v] = append(times[v], time.Since(start)/per)
		}
	}
	med := make([]time.Duration, len(variants))
	for v := range variants {
		slices.Sort(times[v])
		med[v] = times[v][len(times[v])/2]
		t.Logf("%-10s median %v/op", variants[v].name, med[v])
	}
	t.Logf("idempotent throughput / plain    = %.2f (target ≥ 0.75)", float64(med[0])/float64(med[2]))
	t.Logf("idempotent throughput / plain-tx = %.2f", float64(med[1])/float64(med[2]))
	t.Logf("replay throughput / execution    = %.2f (target ≥ 2)", float64(med[2])/float64(med[3]))
}
