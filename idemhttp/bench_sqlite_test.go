package idemhttp_test

import (
	"database/sql"
	"fmt"
	"net/http"
	"testing"

	"github.com/idemkit/idem/idemhttp"
	"github.com/idemkit/idem/internal/testdb"
	"github.com/idemkit/idem/store"
	"github.com/idemkit/idem/store/sqlstore"
)

// The SQLite counterparts of BenchmarkHandlerPlainTx, BenchmarkHandlerIdempotent
// and BenchmarkHandlerReplay (embedded SQLite, no server needed): the same
// one-INSERT handler in its own transaction, behind the middleware, and
// replayed.
//
//	go test -run '^$' -bench BenchmarkSQLiteHandler -benchmem ./idemhttp

func sqliteBenchSetup(b *testing.B) (*sqlstore.Driver, http.Handler) {
	d := testdb.SQLite(b)
	testdb.Exec(b, d, `CREATE TABLE orders (idem_key text NOT NULL, body text NOT NULL)`)
	const q = `INSERT INTO orders (idem_key, body) VALUES (?, ?)`
	return d, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		ctx := r.Context()
		var err error
		if tx, ok := idemhttp.SQLTx(ctx); ok {
			_, err = tx.ExecContext(ctx, q, idemhttp.Key(ctx), "x")
		} else {
			err = store.InTx(ctx, d, func(tx *sql.Tx) error {
				_, err := tx.ExecContext(ctx, q, "", "x")
				return err
			})
		}
		writeOrder(w, err)
	})
}

func BenchmarkSQLiteHandlerPlainTx(b *testing.B) {
	_, h := sqliteBenchSetup(b)
	runBench(b, h, func(int64) string { return "" })
}

func BenchmarkSQLiteHandlerIdempotent(b *testing.B) {
	d, h := sqliteBenchSetup(b)
	mw, err := idemhttp.New(d, idemhttp.Config{})
	if err != nil {
		b.Fatal(err)
	}
	runBench(b, mw.Handler(h), func(i int64) string { return fmt.Sprint("bench-", i) })
}

func BenchmarkSQLiteHandlerReplay(b *testing.B) {
	d, h := sqliteBenchSetup(b)
	mw, err := idemhttp.New(d, idemhttp.Config{})
	if err != nil {
		b.Fatal(err)
	}
	wrapped := mw.Handler(h)
	runBench(b, wrapped, func(int64) string { return "replayed" })
	if n := testdb.Count(b, d, `SELECT count(*) FROM orders`); n != 1 {
		b.Fatalf("%d effects after replays, want 1", n)
	}
}
