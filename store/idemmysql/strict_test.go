package idemmysql_test

import (
	"context"
	"database/sql"
	"errors"
	"github.com/idemkit/idem/store/idemmysql/idemmysqltest"
	"strings"
	"testing"

	mysqldrv "github.com/go-sql-driver/mysql"

	"github.com/idemkit/idem/store/idemmysql"
)

// nonStrictURLs are mysql:// URLs whose parameters ask for a session that
// would truncate a too-long identifier instead of refusing it: sql_mode
// itself in several spellings, ANSI_QUOTES (which would also break idem's
// SQL), and sql_mode set through the value of another parameter
// (go-sql-driver sends parameters as one SET statement).
func nonStrictURLs(base string) map[string]string {
	return map[string]string{
		"empty":      base + "?sql_mode=%27%27",
		"upper name": base + "?SQL_MODE=%27%27",
		"@@session":  base + "?@@session.sql_mode=%27%27",
		"ansi":       base + "?sql_mode=%27ANSI_QUOTES%27",
		"smuggled":   base + "?time_zone=%27%2B00%3A00%27%2C%20sql_mode%3D%27%27",
	}
}

// idem's connections are strict whatever the URL asks: every connection of
// the pool runs in idem's sql_mode, and a value too long for its column is
// an error, never truncated.
func TestStrictModeWhateverTheURL(t *testing.T) {
	t.Parallel()
	base := idemmysqltest.Database(t)
	ctx := context.Background()
	for name, u := range nonStrictURLs(base) {
		t.Run(name, func(t *testing.T) {
			d, err := idemmysql.Open(ctx, u, idemmysql.Config{})
			if err != nil {
				t.Fatal(err)
			}
			defer d.Close()
			// Several connections at once, so the pool opens more than one.
			conns := make([]*sql.Conn, 3)
			for i := range conns {
				if conns[i], err = d.DB().Conn(ctx); err != nil {
					t.Fatal(err)
				}
				defer conns[i].Close()
			}
			for i, c := range conns {
				var mode string
				if err := c.QueryRowContext(ctx, `SELECT @@SESSION.sql_mode`).Scan(&mode); err != nil {
					t.Fatal(err)
				}
				if mode != idemmysql.SQLMode {
					t.Errorf("connection %d: sql_mode %q, want %q", i, mode, idemmysql.SQLMode)
				}
			}
			c := conns[0]
			if _, err := c.ExecContext(ctx, `CREATE TEMPORARY TABLE narrow (v VARBINARY(4) NOT NULL)`); err != nil {
				t.Fatal(err)
			}
			_, err = c.ExecContext(ctx, `INSERT INTO narrow (v) VALUES (?)`, "abcdef")
			if err == nil {
				var v string
				_ = c.QueryRowContext(ctx, `SELECT v FROM narrow`).Scan(&v)
				t.Fatalf("a 6-byte value in a 4-byte column was stored as %q, want an error", v)
			}
		})
	}
}

// DSN sets idem's sql_mode and drops the URL's own, for callers that open
// the *sql.DB themselves; New refuses a pool that is not strict, as it
// refuses one without clientFoundRows.
func TestNewRefusesNonStrictPool(t *testing.T) {
	t.Parallel()
	base := idemmysqltest.Database(t)
	ctx := context.Background()
	dsn, err := idemmysql.DSN(base + "?SQL_MODE=%27%27&sql_mode=%27%27")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(dsn, "sql_mode=%27"+strings.ReplaceAll(idemmysql.SQLMode, ",", "%2C")+"%27") ||
		strings.Count(strings.ToLower(dsn), "sql_mode") != 1 {
		t.Fatalf("DSN %q does not set idem's sql_mode exactly once", dsn)
	}
	db, err := sql.Open("mysql", dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	if _, err := idemmysql.New(ctx, db, idemmysql.Config{}); err != nil {
		t.Fatalf("New on DSN's pool: %v", err)
	}

	// The caller's own DSN, with sql_mode turned off.
	cfg, err := mysqldrv.ParseDSN(dsn)
	if err != nil {
		t.Fatal(err)
	}
	cfg.Params["sql_mode"] = "''"
	loose, err := sql.Open("mysql", cfg.FormatDSN())
	if err != nil {
		t.Fatal(err)
	}
	defer loose.Close()
	if _, err := idemmysql.New(ctx, loose, idemmysql.Config{}); !errors.Is(err, idemmysql.ErrNeedsStrictMode) {
		t.Fatalf("New on a non-strict pool: %v, want ErrNeedsStrictMode", err)
	}
}
