package outbox

import (
	"context"
	"database/sql"
	"strconv"
	"testing"
	"time"

	"github.com/idemkit/idem/internal/testdb"
	"github.com/idemkit/idem/store"
)

// BenchmarkEnqueueSQL is BenchmarkEnqueue through database/sql (pgx
// stdlib), the driver stack of idem bench's peer_watermill_produce: each
// transaction one business row plus one event with a header. idem:
// EnqueueTx; plain: the INSERT of Watermill's SQL publisher into its own
// table layout (PRIMARY KEY (transaction_id, offset), JSON payload and
// metadata). The keyed variant gives each event an ordering key of its
// own (its lock is taken, never waited for), the common shape of an
// order's event.
func BenchmarkEnqueueSQL(b *testing.B) {
	b.Run("keyless", func(b *testing.B) { benchmarkEnqueueSQL(b, false) })
	b.Run("keyed", func(b *testing.B) { benchmarkEnqueueSQL(b, true) })
}

func benchmarkEnqueueSQL(b *testing.B, keyed bool) {
	d := testdb.SQLPostgres(b)
	ctx := context.Background()
	biz := d.Table("bench_biz")
	wm := d.Table("bench_wm")
	for _, s := range []string{
		`CREATE TABLE ` + biz + ` (id text PRIMARY KEY, payload bytea NOT NULL, created_at bigint NOT NULL)`,
		`CREATE TABLE ` + wm + ` ("offset" BIGSERIAL, "uuid" VARCHAR(36) NOT NULL, "created_at" TIMESTAMP NOT NULL DEFAULT CURRENT_TIMESTAMP,
			"payload" JSON DEFAULT NULL, "metadata" JSON DEFAULT NULL, "transaction_id" xid8 NOT NULL, PRIMARY KEY ("transaction_id", "offset"))`,
	} {
		if _, err := d.Pool().Exec(ctx, s); err != nil {
			b.Fatal(err)
		}
	}
	d.DB().SetMaxIdleConns(16)
	o, _ := New(d, Config{})
	payload := []byte(`{"order_id":"00000000-0000-0000-0000-000000000000","amount_cents":4200,"currency":"EUR","seats":["A1","A2"],"x":"y"}`)
	interleaved(b, func(idemMode bool, i int) error {
		id := "o-" + strconv.Itoa(i)
		return store.InTx(ctx, d, func(tx *sql.Tx) error {
			if _, err := d.Tx(tx).Exec(ctx, `INSERT INTO `+biz+` (id, payload, created_at) VALUES ($1, $2, $3)`, id, payload, store.Micros(time.Now())); err != nil {
				return err
			}
			if !idemMode {
				_, err := d.Tx(tx).Exec(ctx, `INSERT INTO `+wm+` (uuid, payload, metadata, transaction_id) VALUES ($1, $2, $3, pg_current_xact_id())`,
					"u-"+id, payload, `{"order_id":"`+id+`"}`)
				return err
			}
			e := Event{Type: "bench.order.created", Topic: "orders", Payload: payload, Headers: map[string]string{"order_id": id}}
			if keyed {
				e.Key = id
			}
			_, err := o.EnqueueTx(ctx, tx, e)
			return err
		})
	})
}
