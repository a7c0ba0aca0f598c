package bench

import (
	"context"
	"database/sql"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/idemkit/idem/store/idemmysql"
)

// TestMySQLPairs: with Config.MySQL, Open creates the run's database on
// that server (migrated), the *_mysql pairs are listed and each measures
// both sides on it, and Close drops the database again.
func TestMySQLPairs(t *testing.T) {
	u := os.Getenv("IDEM_TEST_MYSQL_URL")
	if u == "" {
		t.Skip("IDEM_TEST_MYSQL_URL is not set: skipping the bench on MySQL")
	}
	ctx := context.Background()
	e, err := Open(ctx, Config{MySQL: u, SQLiteDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	exists := func() bool {
		t.Helper()
		d, err := idemmysql.ServerDSN(u)
		if err != nil {
			t.Fatal(err)
		}
		db, err := sql.Open("mysql", d)
		if err != nil {
			t.Fatal(err)
		}
		defer db.Close()
		var n int
		if err := db.QueryRowContext(ctx, `SELECT count(*) FROM information_schema.schemata WHERE schema_name = ?`, e.myDatabase).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n == 1
	}
	if !e.hasMySQL() || !exists() {
		_ = e.Close()
		t.Fatalf("database %q: not created", e.myDatabase)
	}
	var pairs []Pair
	var names []string
	for _, p := range e.Pairs() {
		if strings.HasSuffix(p.Name, "_mysql") {
			pairs = append(pairs, p)
			names = append(names, p.Name)
		}
	}
	want := []string{"inbox_vs_plain_1w_mysql", "inbox_vs_plain_8w_mysql", "inbox_batch_vs_single_mysql",
		"inbox_batch_handler_vs_single_mysql", "http_vs_plain_mysql", "http_replay_vs_execute_mysql", "outbox_relay_mysql",
		"outbox_relay_delete_vs_mark_mysql"}
	if !slices.Equal(names, want) {
		t.Errorf("MySQL pairs %v, want %v", names, want)
	}
	rep, err := Run(ctx, pairs, Options{Budget: 3 * time.Second})
	if err != nil {
		_ = e.Close()
		t.Fatal(err)
	}
	for _, r := range rep.Results {
		if r.APerS <= 0 || r.BPerS <= 0 {
			t.Errorf("%s: %v/s against %v/s, want both measured", r.Name, r.APerS, r.BPerS)
		}
	}
	if err := e.Close(); err != nil {
		t.Fatal(err)
	}
	if exists() {
		t.Fatalf("database %q still exists after Close", e.myDatabase)
	}
}
