package migrate_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"github.com/idemkit/idem/migrate"
	"github.com/idemkit/idem/store/sqlstore"
)

// A service migrates at start-up, before it builds idem's parts: Up
// applies what is pending in one transaction under the migration lock, so
// several instances starting at once are safe, and a second Up finds
// nothing to do. Check is the read-only test idemhttp.New and outbox.New
// run.
func Example() {
	ctx := context.Background()
	dir, err := os.MkdirTemp("", "migrate-example")
	if err != nil {
		panic(err)
	}
	defer os.RemoveAll(dir)
	// The program links the SQLite driver: import _ "modernc.org/sqlite".
	d, err := sqlstore.OpenSQLite(filepath.Join(dir, "idem.db"), sqlstore.SQLiteConfig{}, sqlstore.Config{})
	if err != nil {
		panic(err)
	}
	defer d.Close()

	fmt.Println("before:", errors.Is(migrate.Check(ctx, d), migrate.ErrNotMigrated))

	m := migrate.New(d)
	applied, err := m.Up(ctx)
	if err != nil {
		panic(err)
	}
	all, err := migrate.Migrations(d.Dialect(), d.Names())
	if err != nil {
		panic(err)
	}
	fmt.Println("applied all:", len(applied) == len(all))
	again, _ := m.Up(ctx) // another instance, or the next start
	fmt.Println("second Up applies:", len(again))
	fmt.Println("after:", migrate.Check(ctx, d))

	st, err := m.Status(ctx)
	if err != nil {
		panic(err)
	}
	fmt.Println(st[0].Version, st[0].Name, st[0].Applied)
	// Output:
	// before: true
	// applied all: true
	// second Up applies: 0
	// after: <nil>
	// 1 inbox true
}
