package sqlmeta_test

import (
	"context"
	"testing"

	"github.com/idemkit/idem/internal/sqlmeta"
	"github.com/idemkit/idem/internal/testdb"
	"github.com/idemkit/idem/store"
)

// TableExists sees a migrated table and not a missing one; EstimateRows
// gives an estimate only where the dialect keeps one, and a fresh one after
// the table is analysed.
func TestTableExistsAndEstimate(t *testing.T) {
	t.Parallel()
	testdb.EachDriver(t, func(t *testing.T, e testdb.Driver) {
		ctx := context.Background()
		d := e.D
		for name, want := range map[string]bool{"inbox": true, "dead_letters": true, "no_such_table": false} {
			ok, err := sqlmeta.TableExists(ctx, d, name)
			if err != nil || ok != want {
				t.Errorf("TableExists(%s) = %v, %v; want %v", name, ok, err, want)
			}
		}
		testdb.Exec(t, d, `DROP TABLE `+d.Table("effects"))
		if ok, err := sqlmeta.TableExists(ctx, d, "effects"); err != nil || ok {
			t.Errorf("dropped table exists: %v, %v", ok, err)
		}
		testdb.Exec(t, d, `INSERT INTO `+d.Table("inbox")+` (consumer, message_id, fingerprint, received_at, expires_at) VALUES ('c', 'm1', $1, 0, 0), ('c', 'm2', $1, 0, 0)`, []byte{1})
		n, ok, err := sqlmeta.EstimateRows(ctx, d, "inbox")
		if err != nil {
			t.Fatal(err)
		}
		if d.Dialect() == store.SQLite {
			if ok {
				t.Fatalf("SQLite estimate %d, want none (rows are counted)", n)
			}
			return
		}
		testdb.Exec(t, d, `ANALYZE `+d.Table("inbox"))
		if n, ok, err = sqlmeta.EstimateRows(ctx, d, "inbox"); err != nil || !ok || n != 2 {
			t.Fatalf("estimate after ANALYZE = %d, %v, %v; want 2", n, ok, err)
		}
		if _, ok, err = sqlmeta.EstimateRows(ctx, d, "no_such_table"); err != nil || ok {
			t.Fatalf("estimate of a missing table: %v, %v", ok, err)
		}
	})
}
