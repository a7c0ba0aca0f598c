package idemmysql_test

import (
	"context"
	"database/sql"
	"testing"

	"github.com/idemkit/idem/store"
	"github.com/idemkit/idem/store/idemmysql/idemmysqltest"
	"github.com/idemkit/idem/versionguard"
)

// The version guard on MySQL: versions 7, 9, 8 leave 9 (8 stale, reading
// the current 9), and a row whose stored version is NULL is not reported
// applied when nothing was written: like PostgreSQL's and SQLite's
// ON CONFLICT … WHERE, NULL is not older, and reading it back fails.
func TestVersionGuard(t *testing.T) {
	t.Parallel()
	d := idemmysqltest.Open(t)
	ctx := context.Background()
	if _, err := d.Pool().Exec(ctx, `CREATE TABLE vg_seats (show_id VARCHAR(64) PRIMARY KEY, seats_left INT NOT NULL, version BIGINT NULL)`); err != nil {
		t.Fatal(err)
	}
	spec := func(show string, seats int) versionguard.Spec {
		return versionguard.Spec{Table: "vg_seats", KeyColumns: []string{"show_id"}, KeyValues: []any{show},
			Set: map[string]any{"seats_left": seats}, Upsert: true}
	}
	apply := func(s versionguard.Spec, v int64) (versionguard.Result, error) {
		var r versionguard.Result
		err := store.InTx(ctx, d, func(tx *sql.Tx) error {
			var err error
			r, err = versionguard.ApplyTx(ctx, d, tx, s, v)
			return err
		})
		return r, err
	}
	for _, v := range []int64{7, 9, 8} {
		r, err := apply(spec("show-1", int(100-v)), v)
		if err != nil {
			t.Fatal(err)
		}
		if want := v != 8; r.Applied != want || (v == 8 && (!r.Stale || r.Current != 9)) {
			t.Errorf("version %d: %+v", v, r)
		}
	}
	var seats int
	var version sql.NullInt64
	if err := d.Pool().QueryRow(ctx, `SELECT seats_left, version FROM vg_seats WHERE show_id = $1`, "show-1").Scan(&seats, &version); err != nil {
		t.Fatal(err)
	}
	if seats != 91 || version.Int64 != 9 {
		t.Fatalf("row = (%d, %v), want (91, 9)", seats, version)
	}

	if _, err := d.Pool().Exec(ctx, `INSERT INTO vg_seats (show_id, seats_left, version) VALUES ('show-2', 5, NULL)`); err != nil {
		t.Fatal(err)
	}
	if r, err := apply(spec("show-2", 1), 3); err == nil || r.Applied {
		t.Errorf("over a NULL version: %+v, %v; want an error, nothing applied", r, err)
	}
	if err := d.Pool().QueryRow(ctx, `SELECT seats_left, version FROM vg_seats WHERE show_id = $1`, "show-2").Scan(&seats, &version); err != nil {
		t.Fatal(err)
	}
	if seats != 5 || version.Valid {
		t.Fatalf("row = (%d, %v), want (5, NULL) unchanged", seats, version)
	}
}
