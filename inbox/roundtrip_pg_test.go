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
// then the savepoint's release. Handlers writing through Exec (one
// statement per message, or the BatchHandler's one) have their statements
// sent with the release: two round trips for the batch. Measured through a proxy that counts round
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
	// The same handlers writing through Exec: their statements travel
	// with the release of the fast pass's savepoint.
	hq := func(ctx context.Context, tx pgx.Tx, m idem.Message) error {
		return Exec(ctx, d, tx, insert, m.ID)
	}
	many := func(ms []idem.Message) (string, []any) {
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
		return b.String(), args
	}
	bh := func(ctx context.Context, tx pgx.Tx, ms []idem.Message) error {
		sql, args := many(ms)
		_, err := tx.Exec(ctx, sql, args...)
		return err
	}
	bhq := func(ctx context.Context, tx pgx.Tx, ms []idem.Message) error {
		sql, args := many(ms)
		return Exec(ctx, d, tx, sql, args...)
	}
	batch := func(round int, withBH, queued bool) int {
		msgs := make([]idem.Message, 10)
		for i := range msgs {
			msgs[i] = idem.Message{ID: fmt.Sprintf("m-%v-%v-%d-%d", withBH, queued, round, i), Payload: []byte(`{}`)}
		}
		tx, err := d.Begin(ctx)
		if err != nil {
			t.Fatal(err)
		}
		defer func() { _ = d.Rollback(ctx, tx) }()
		p.Reset()
		var out []Outcome
		switch {
		case withBH && queued:
			out, err = in.ProcessBatchWithTx(ctx, tx, "rt", msgs, bhq, hq)
		case withBH:
			out, err = in.ProcessBatchWithTx(ctx, tx, "rt", msgs, bh, h)
		case queued:
			out, err = in.ProcessBatchTx(ctx, tx, "rt", msgs, hq)
		default:
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
		var n int
		if err := d.Pool().QueryRow(ctx, `SELECT count(*) FROM `+d.Table("rt_rows")+` WHERE id LIKE $1`, fmt.Sprintf("m-%v-%v-%d-%%", withBH, queued, round)).Scan(&n); err != nil {
			t.Fatal(err)
		}
		if n != len(msgs) {
			t.Fatalf("BatchHandler %v, Exec %v: %d business rows after commit, want %d", withBH, queued, n, len(msgs))
		}
		return rt
	}
	for _, c := range []struct {
		bh, queued bool
		want       int
	}{{true, false, 3}, {false, false, 12}, {true, true, 2}, {false, true, 2}} {
		t.Logf("BatchHandler %v, Exec %v, first batch on the connection: %d round trips", c.bh, c.queued, batch(0, c.bh, c.queued))
		for round := 1; round <= 2; round++ {
			if got := batch(round, c.bh, c.queued); got != c.want {
				t.Errorf("BatchHandler %v, Exec %v, batch %d: %d round trips, want %d", c.bh, c.queued, round, got, c.want)
			}
		}
	}
}
