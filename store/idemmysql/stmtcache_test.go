package idemmysql_test

import (
	"context"
	"database/sql"
	"testing"
	"time"

	"github.com/idemkit/idem/store/idemmysql"
	"github.com/idemkit/idem/store/idemmysql/idemmysqltest"
)

// sessionPrepares is the server's count of statements prepared on tx's
// connection so far.
func sessionPrepares(t *testing.T, d *idemmysql.Driver, tx *sql.Tx) int {
	t.Helper()
	var name string
	var n int
	if err := d.Tx(tx).QueryRow(context.Background(), `SHOW SESSION STATUS LIKE 'Com_stmt_prepare'`).Scan(&name, &n); err != nil {
		t.Fatal(err)
	}
	return n
}

// runTexts runs each text rounds times on a transaction of Begin, checks
// each answer, and returns how many statements the server prepared.
func runTexts(t *testing.T, d *idemmysql.Driver, rounds int, texts ...string) int {
	t.Helper()
	ctx := context.Background()
	tx, err := d.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer d.Rollback(ctx, tx)
	before := sessionPrepares(t, d, tx)
	for i := range rounds {
		for _, text := range texts {
			var got int64
			if err := d.Tx(tx).QueryRow(ctx, text, i).Scan(&got); err != nil {
				t.Fatalf("%s: %v", text, err)
			}
			if got != int64(i)+1 {
				t.Fatalf("%s with %d = %d, want %d", text, i, got, i+1)
			}
		}
	}
	return sessionPrepares(t, d, tx) - before
}

// A statement with arguments is prepared once per connection and then
// executed by reference (one round trip instead of prepare, execute and
// close); past Config.StatementCache texts, and with a negative one, each
// run prepares again.
func TestStatementCachePreparesOncePerConnection(t *testing.T) {
	url := idemmysqltest.Database(t)
	open := func(cache int) *idemmysql.Driver {
		d, err := idemmysql.Open(context.Background(), url, idemmysql.Config{StatementCache: cache})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { d.Close() })
		return d
	}
	const a, b, c = `SELECT $1 + 1`, `SELECT $1 + 2 - 1`, `SELECT $1 + 3 - 2`
	if n := runTexts(t, open(0), 10, a, b); n > 2 {
		t.Errorf("default cache: %d prepares for two texts run 10 times each, want at most 2", n)
	}
	if n := runTexts(t, open(-1), 10, a); n != 10 {
		t.Errorf("no cache: %d prepares for a text run 10 times, want 10", n)
	}
	if n := runTexts(t, open(2), 10, a, b, c); n > 12 || n < 10 {
		t.Errorf("a cache of 2: %d prepares for three texts run 10 times each, want 10 (the third) and up to 2", n)
	}
}

// A transaction holding the pool's only connection still runs a statement
// the cache has not prepared yet (preparing it would need a second
// connection): it runs unprepared instead of waiting (a wait would end
// only with the context's deadline).
func TestStatementCacheNeverWaitsForASecondConnection(t *testing.T) {
	d, err := idemmysql.Open(context.Background(), idemmysqltest.Database(t), idemmysql.Config{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { d.Close() })
	d.DB().SetMaxOpenConns(1)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	tx, err := d.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer d.Rollback(context.Background(), tx)
	for i := range 3 {
		var got int64
		if err := d.Tx(tx).QueryRow(ctx, `SELECT $1 + 41`, i).Scan(&got); err != nil || got != int64(i)+41 {
			t.Fatalf("a statement in the transaction holding the only connection: %d, %v", got, err)
		}
	}
}
