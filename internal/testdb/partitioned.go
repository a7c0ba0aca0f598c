package testdb

import (
	"context"
	"os"
	"testing"
	"time"

	"github.com/idemkit/idem/store"
	"github.com/idemkit/idem/store/pgxstore"
)

// EnvPartitioned, when set (to anything), makes [EachDriver] also run each
// body on "pgx-partitioned": the pgx driver on a store converted to the
// partitioned layout (store.LayoutPartitioned: the inbox, the idempotency
// keys and the effect ledger range-partitioned by expiry, the outbox by
// creation; see package retention), so a feature's whole suite can be run
// against it on demand:
//
//	IDEM_TEST_PARTITIONED=1 go test ./inbox/ ./effect/ ./outbox/ ./consumer/
const EnvPartitioned = "IDEM_TEST_PARTITIONED"

// partitionedRequested reports whether EnvPartitioned is set.
func partitionedRequested() bool { return os.Getenv(EnvPartitioned) != "" }

// PgxPartitioned returns a migrated pgx store on a fresh schema, converted
// to the partitioned layout with daily partitions from yesterday to eight
// days ahead (what retention.Partition creates; done here with the
// layout's statements because this package cannot import retention).
func PgxPartitioned(t testing.TB) *pgxstore.Driver {
	t.Helper()
	pool, schema := PgxPool(t)
	d, err := pgxstore.New(pool, pgxstore.Config{Names: store.Names{Schema: schema, Layout: store.LayoutPartitioned}})
	if err != nil {
		t.Fatal(err)
	}
	MustMigrate(t, d)
	ctx := context.Background()
	p := d.Statements().Partitions
	q := d.Pool()
	if _, err := q.Exec(ctx, p.Functions); err != nil {
		t.Fatalf("testdb: partitioned layout: %v", err)
	}
	day := time.Now().UTC().Truncate(24 * time.Hour)
	for _, tb := range p.Tables {
		if _, err := q.Exec(ctx, p.Convert, tb.Name, tb.Key, tb.Column); err != nil {
			t.Fatalf("testdb: partition %s: %v", tb.Name, err)
		}
		for i := -1; i <= 8; i++ {
			lo := day.AddDate(0, 0, i)
			var created bool
			if err := q.QueryRow(ctx, p.Add, tb.Name, tb.Name+"_p"+lo.Format("20060102"), store.Micros(lo), store.Micros(lo.AddDate(0, 0, 1)), "10s", tb.Column).Scan(&created); err != nil {
				t.Fatalf("testdb: partition %s: %v", tb.Name, err)
			}
		}
	}
	if _, err := q.Exec(ctx, p.Inserts); err != nil {
		t.Fatalf("testdb: partitioned layout: %v", err)
	}
	return d
}
