package pgxstore_test

import (
	"context"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/idemkit/idem/internal/pgproxy"
	"github.com/idemkit/idem/internal/testdb"
)

// BenchmarkReservedFirstStatement is a reserved transaction with one
// statement and a commit (BeginReserved, the first Exec or QueryRow,
// EndReserved), as idemhttp runs a one-statement handler: "pgconn" sends
// the first statement with its BEGIN as prepared statements in a pgconn
// batch (the default), "traced" through a pgx.Batch (what a pool with a
// tracer gets, and what every pool got before; the tracer itself does
// nothing). Read allocs/op: ns/op includes the counting proxy between the
// pool and the server.
//
//	IDEM_TEST_POSTGRES_URL=… go test -run '^$' -bench ReservedFirstStatement -benchmem ./store/pgxstore/
func BenchmarkReservedFirstStatement(b *testing.B) {
	for _, traced := range []bool{false, true} {
		var configure []func(*pgxpool.Config)
		if traced {
			configure = append(configure, func(c *pgxpool.Config) { c.ConnConfig.Tracer = &batchCounter{} })
		}
		d, _ := pgproxy.Pgx(b, configure...)
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
