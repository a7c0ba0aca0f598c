package pgxstore_test

import (
	"context"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/idemkit/idem/internal/testdb"
	"github.com/idemkit/idem/store"
	"github.com/idemkit/idem/store/pgxstore"
)

// BenchmarkReservedFirstStatement is a reserved transaction with one
// statement and a commit (BeginReserved, the first Exec or QueryRow,
// EndReserved), as idemhttp runs a one-statement handler, on a pool of one
// connection straight to the server (no counting proxy, whose allocations
// would be counted too). "pgconn" is the default: the first statement
// goes with its BEGIN as prepared statements in a pgconn batch. "traced"
// is a pool with a tracer, which sends the first statement and the commit
// through pgx.Batch (the tracer itself does nothing); before the pgconn
// path, every pool sent the first statement that way. Read allocs/op:
//
//	IDEM_TEST_POSTGRES_URL=… go test -run '^$' -bench ReservedFirstStatement -benchmem ./store/pgxstore/
func BenchmarkReservedFirstStatement(b *testing.B) {
	for _, traced := range []bool{false, true} {
		d := benchDriver(b, traced)
		ctx := context.Background()
		testdb.Exec(b, d, `CREATE TABLE bf (k bigint PRIMARY KEY)`)
		var k int64
		for _, kind := range []string{"exec", "queryrow"} {
			name := map[bool]string{false: "pgconn", true: "traced"}[traced] + "/" + kind
			b.Run(name, func(b *testing.B) {
				b.ReportAllocs()
				for b.Loop() {
					k++
					tx, ok, err := d.BeginReserved(ctx, nil)
					if err != nil || !ok {
						b.Fatalf("BeginReserved ok %v err %v", ok, err)
					}
					if kind == "exec" {
						_, err = tx.Exec(ctx, `INSERT INTO bf (k) VALUES ($1)`, k)
					} else {
						var got int64
						err = tx.QueryRow(ctx, `INSERT INTO bf (k) VALUES ($1) RETURNING k`, k).Scan(&got)
					}
					if err != nil {
						b.Fatal(err)
					}
					if err := d.EndReserved(ctx, tx, true, nil, nil); err != nil {
						b.Fatal(err)
					}
				}
			})
		}
	}
}

// benchDriver is a migrated driver on a fresh schema, over a pool of one
// connection to the server, with a tracer that does nothing when traced.
func benchDriver(b *testing.B, traced bool) *pgxstore.Driver {
	conn, schema := testdb.PostgresSchema(b)
	cfg, err := pgxpool.ParseConfig(conn)
	if err != nil {
		b.Fatal(err)
	}
	cfg.MaxConns = 1
	if traced {
		cfg.ConnConfig.Tracer = &batchCounter{}
	}
	pool, err := pgxpool.NewWithConfig(context.Background(), cfg)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(pool.Close)
	d, err := pgxstore.New(pool, pgxstore.Config{Names: store.Names{Schema: schema}})
	if err != nil {
		b.Fatal(err)
	}
	testdb.MustMigrate(b, d)
	return d
}
