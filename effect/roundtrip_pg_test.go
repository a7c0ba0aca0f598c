package effect

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/internal/pgproxy"
	"github.com/idemkit/idem/store"
)

// On pgx a batch of completions is one round trip carrying one statement
// (Effects.CompleteBatch, the completions as arrays), once the connection
// has it prepared, and it stays fenced per effect: the one another claimer
// took over answers ErrLeaseLost and is left untouched, the others are
// completed. Measured through a proxy that counts round trips.
func TestCompleteBatchOneRoundTrip(t *testing.T) {
	d, p := pgproxy.Pgx(t)
	ctx := context.Background()
	l, err := New[pgx.Tx](d, Config{Lease: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	w, err := NewWorker(l, WorkerConfig[pgx.Tx]{})
	if err != nil {
		t.Fatal(err)
	}
	const n = 8
	round := func(name string, victim bool) {
		err := store.InTx(ctx, d, func(tx pgx.Tx) error {
			for i := range n {
				if _, _, err := l.ScheduleTx(ctx, tx, Effect{Key: fmt.Sprintf("%s:%d", name, i), Kind: name}); err != nil {
					return err
				}
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
		claimed, err := w.claim(ctx, &kind{name: name}, n)
		if err != nil || len(claimed) != n {
			t.Fatalf("%s: claim: %d, %v", name, len(claimed), err)
		}
		victimKey := ""
		if victim {
			victimKey = claimed[3].Key
			if _, err := d.Pool().Exec(ctx, `UPDATE `+d.Table("effects")+` SET token = token + 1 WHERE effect_key = $1`, victimKey); err != nil {
				t.Fatal(err)
			}
		}
		batch := make([]completion, len(claimed))
		for i, e := range claimed {
			batch[i] = completion{key: e.Key, token: e.Token, result: []byte("r:" + e.Key), done: make(chan error, 1)}
		}
		c := newCompleter(l, n, time.Millisecond)
		p.Reset()
		c.flush(ctx, batch)
		rt, sent := p.RoundTrips(), p.Sent()
		for _, b := range batch {
			err := <-b.done
			e, gerr := l.Get(ctx, b.key)
			if gerr != nil {
				t.Fatal(gerr)
			}
			if b.key == victimKey {
				if !errors.Is(err, idem.ErrLeaseLost) || e.State != InProgress || len(e.Result) != 0 {
					t.Fatalf("%s: the taken-over effect answered %v and is %+v; want ErrLeaseLost, untouched", name, err, e)
				}
				continue
			}
			if err != nil || e.State != Completed || string(e.Result) != "r:"+b.key {
				t.Fatalf("%s: %s answered %v and is %+v; want completed", name, b.key, err, e)
			}
		}
		if victim { // the first round prepared the statement on the connection
			if rt != 1 {
				t.Fatalf("%s: %d round trips to record %d completions; want 1", name, rt, n)
			}
			var stmts []string
			for _, m := range sent {
				if q := m.SQL(); q != "" {
					stmts = append(stmts, q)
				}
			}
			if len(stmts) > 1 || len(stmts) == 1 && !strings.Contains(stmts[0], "unnest(") {
				t.Fatalf("%s: statements sent %q; want at most the one set-based UPDATE", name, stmts)
			}
		}
		t.Logf("%s: %d completions, %d round trips", name, n, rt)
	}
	round("warm", false)
	round("fenced", true)
}
