package versionguard_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"

	"github.com/idemkit/idem/store/sqlstore"
	"github.com/idemkit/idem/versionguard"
)

// Events 7, 9 and 8 of one show arrive out of order: 8 is stale.
func ExampleApply() {
	ctx := context.Background()
	dir, _ := os.MkdirTemp("", "vg-example")
	defer os.RemoveAll(dir)
	// The program links the SQLite driver: import _ "modernc.org/sqlite".
	d, err := sqlstore.OpenSQLite(filepath.Join(dir, "app.db"), sqlstore.SQLiteConfig{}, sqlstore.Config{})
	if err != nil {
		panic(err)
	}
	defer d.Close()
	if _, err := d.Pool().Exec(ctx, `CREATE TABLE seats (show_id text PRIMARY KEY, seats_left integer, version integer)`); err != nil {
		panic(err)
	}
	for _, v := range []int64{7, 9, 8} {
		r, err := versionguard.Apply(ctx, d.Pool(), d.Statements(), versionguard.Spec{
			Table: "seats", KeyColumns: []string{"show_id"}, KeyValues: []any{"show-1"},
			Set: map[string]any{"seats_left": 100 - v}, Upsert: true,
		}, v)
		if err != nil {
			panic(err)
		}
		fmt.Printf("v%d applied=%v stale=%v\n", v, r.Applied, r.Stale)
	}
	// Output:
	// v7 applied=true stale=false
	// v9 applied=true stale=false
	// v8 applied=false stale=true
}
