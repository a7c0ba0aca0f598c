package sqlstore_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"path/filepath"
	"testing"

	sqlitesql "github.com/idemkit/idem/internal/dialect/sqlite"
	"github.com/idemkit/idem/internal/sqlset"
	"github.com/idemkit/idem/internal/testdb"
	"github.com/idemkit/idem/migrate"
	"github.com/idemkit/idem/store"
	"github.com/idemkit/idem/store/sqlstore"
)

// externalSQL stands for a dialect defined in its own package: here
// SQLite's statements under another name, with a translation that marks
// every error so the test sees that it is the one applied.
type externalSQL struct{ set *sqlset.Set }

var errMarked = errors.New("translated by the external dialect")

func (e *externalSQL) Statements(n store.Names) *sqlset.Set {
	e.set = sqlitesql.Statements(n)
	return e.set
}

func (e *externalSQL) Translate(err error) error { return fmt.Errorf("%w: %w", errMarked, err) }

// TestExternalDialect: a dialect outside sqlstore plugs in through
// Config.SQL — its statements are the driver's, its translation applies to
// every error (ErrNoRows still comes from sqlstore), and the migrator runs
// on it without knowing its name.
func TestExternalDialect(t *testing.T) {
	testdb.SkipWithoutSQLite(t)
	ctx := context.Background()
	db, err := sql.Open("sqlite", sqlstore.SQLiteDSN(filepath.Join(t.TempDir(), "x.db"), sqlstore.SQLiteConfig{}))
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	if _, err := sqlstore.New(db, sqlstore.Config{Dialect: "external"}); err == nil {
		t.Fatal("an unknown dialect without Config.SQL was accepted")
	}
	ext := &externalSQL{}
	d, err := sqlstore.New(db, sqlstore.Config{Dialect: "external", SQL: ext})
	if err != nil {
		t.Fatal(err)
	}
	if d.Dialect() != "external" || d.Statements() != ext.set {
		t.Fatalf("dialect %q / statements from the external dialect: %v", d.Dialect(), d.Statements() == ext.set)
	}
	if err := migrate.Up(ctx, d); err != nil {
		t.Fatalf("migrate on the external dialect: %v", err)
	}
	_, err = d.Pool().Exec(ctx, `INSERT INTO no_such_table VALUES (1)`)
	if !errors.Is(err, errMarked) {
		t.Fatalf("Exec error not translated by the dialect: %v", err)
	}
	var n int
	err = d.Pool().QueryRow(ctx, `SELECT 1 FROM `+d.Table("inbox")+` WHERE consumer = 'none'`).Scan(&n)
	if !errors.Is(err, store.ErrNoRows) {
		t.Fatalf("no row: %v, want store.ErrNoRows", err)
	}
}
