package outbox

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/idemkit/idem/internal/testdb"
	"github.com/idemkit/idem/store"
)

// BenchmarkEnqueue measures producer transactions/s on PostgreSQL with 8
// concurrent producers, each transaction = one business row + one event
// (idem: Enqueue), against the same business row + one plain INSERT of the
// event into a bare table (what a plain SQL publisher costs). The two run
// interleaved in rounds of b.N transactions (5 rounds each) on a noisy
// machine; it reports the medians and their ratio (idem/plain).
func BenchmarkEnqueue(b *testing.B) {
	d := testdb.Pgx(b)
	ctx := context.Background()
	biz := d.Table("bench_biz")
	plain := d.Table("bench_plain")
	for _, s := range []string{
		`CREATE TABLE ` + biz + ` (id bigserial PRIMARY KEY, v text NOT NULL)`,
		`CREATE TABLE ` + plain + ` (seq bigserial PRIMARY KEY, uuid text NOT NULL UNIQUE, payload bytea NOT NULL, metadata text NOT NULL, created_at timestamptz NOT NULL DEFAULT now())`,
	} {
		if _, err := d.Pool().Exec(ctx, s); err != nil {
			b.Fatal(err)
		}
	}
	o, _ := New(d, Config{})
	interleaved(b, func(idemMode bool, i int) error {
		return store.InTx(ctx, d, func(tx pgx.Tx) error {
			if _, err := tx.Exec(ctx, `INSERT INTO `+biz+` (v) VALUES ($1)`, "order"); err != nil {
				return err
			}
			e := ev(fmt.Sprintf("k%d", i%1000), i)
			if !idemMode {
				_, err := tx.Exec(ctx, `INSERT INTO `+plain+` (uuid, payload, metadata) VALUES ($1, $2, $3)`,
					fmt.Sprint("id-", i), e.Payload, `{}`)
				return err
			}
			_, err := o.EnqueueTx(ctx, tx, e)
			return err
		})
	})
}

// interleaved runs 5 rounds of b.N producer transactions on each side (8
// concurrent producers, idem and plain alternating; tx gets a number unique
// across rounds) and reports the medians of the rates and their ratio.
func interleaved(b *testing.B, tx func(idemMode bool, i int) error) {
	var ids atomic.Int64
	round := func(idemMode bool) float64 {
		var next atomic.Int64
		start := time.Now()
		var wg sync.WaitGroup
		for range 8 {
			wg.Go(func() {
				for next.Add(1) <= int64(b.N) {
					if err := tx(idemMode, int(ids.Add(1))); err != nil {
						b.Error(err)
						return
					}
				}
			})
		}
		wg.Wait()
		return float64(b.N) / time.Since(start).Seconds()
	}
	var a, p []float64
	for range 5 {
		a = append(a, round(true))
		p = append(p, round(false))
	}
	slices.Sort(a)
	slices.Sort(p)
	b.ReportMetric(a[2], "idem-tx/s")
	b.ReportMetric(p[2], "plain-tx/s")
	b.ReportMetric(a[2]/p[2], "ratio")
}
