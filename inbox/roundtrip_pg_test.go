package inbox

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/internal/pgproxy"
	"github.com/idemkit/idem/internal/testdb"
)

// A batch on pgx, once the connection has its statements: the multi-row
// inbox insert and the fast pass's savepoint are one round trip, then the
// handlers (one BatchHandler call: one round trip; or one per message),
// then the savepoint's release. Measured through a proxy that counts round
// trips.
func TestBatchRoundTrips(t *testing.T) {
	d, p := pgproxy.Pgx(t)
	ctx := context.Background()
	testdb.Exec(t, d, `CREATE TABLE `+d.Table("rt_rows")+` (id text PRIMARY KEY)`)
	in, err := New(d, Config{})
	if err != nil {
		t.Fatal(err)
	}
	insert := `INSERT INTO ` + d.Table("rt_rows") + ` (id) VALUES ($1)`
	h := func(ctx context.Context, tx pgx.Tx, m idem.Message) error {
		_, err := tx.Exec(ctx, insert, m.ID)
		return err
	}
	bh := func(ctx context.Context, tx pgx.Tx, ms []idem.Message) error {
		var b strings.Builder
		args := make([]any, len(ms))
		b.WriteString(`INSERT INTO ` + d.Table("rt_rows") + ` (id) VALUES `)
		for i, m := range ms {
			if i > 0 {
				b.WriteByte(',')
			}
			fmt.Fprintf(&b, "($%d)", i+1)
			args[i] = m.ID
		}
		_, err := tx.Exec(ctx, b.String(), args...)
		return err
	}
	batch := func(round int, withBH bool) int {
		msgs := make([]idem.Message, 10)
		for i := range msgs {
			msgs[i] = idem.Message{ID: fmt.Sprintf("m-%v-%d-%d", withBH, round, i), Payload: []byte(`{}`)}
		}
		tx, err := d.Begin(ctx)
		if err != nil {
			t.Fatal(err)
		}
		defer func() { _ = d.Rollback(ctx, tx) }()
		p.Reset()
		var out []Outcome
		if withBH {
			out, err = in.ProcessBatchWithTx(ctx, tx, "rt", msgs, bh, h)
		} else {
			out, err = in.ProcessBatchTx(ctx, tx, "rt", msgs, h)
		}
		rt := p.RoundTrips()
		if err != nil {
			t.Fatal(err)
		}
		for i, o := range out {
			if o.Err != nil || o.Result != Processed {
				t.Fatalf("message %d: %+v", i, o)
			}
		}
		if err := d.Commit(ctx, tx); err != nil {
			t.Fatal(err)
		}
		return rt
	}
	for _, c := range []struct {
		bh   bool
		want int
	}{{true, 3}, {false, 12}} {
		t.Logf("BatchHandler %v, first batch on the connection: %d round trips", c.bh, batch(0, c.bh))
		for round := 1; round <= 2; round++ {
			if got := batch(round, c.bh); got != c.want {
				t.Errorf("BatchHandler %v, batch %d: %d round trips, want %d", c.bh, round, got, c.want)
			}
		}
	}
}
