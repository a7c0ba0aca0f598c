package effect

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/internal/testdb"
	"github.com/idemkit/idem/store"
)

// brokenBatch is a driver whose SendBatch fails as a whole.
type brokenBatch struct{ store.Driver[any] }

var errBatch = errors.New("test: the batch failed")

func (brokenBatch) SendBatch(context.Context, store.Querier, []store.Stmt) error { return errBatch }

// A batch answers each completion on its own: nil for the effects it
// completed, ErrLeaseLost for exactly the one another claimer took over;
// and when the batch fails as a whole, each completion is recorded alone
// with the same answers.
func TestCompleteBatchAnswersEachEffect(t *testing.T) {
	t.Parallel()
	testdb.EachDriver(t, func(t *testing.T, td testdb.Driver) {
		for _, broken := range []bool{false, true} {
			ctx := context.Background()
			d := td.D
			if broken {
				d = brokenBatch{td.D}
			}
			l, err := New(d, Config{Lease: time.Minute})
			if err != nil {
				t.Fatal(err)
			}
			prefix := "ok:"
			if broken {
				prefix = "broken:"
			}
			keys := []string{prefix + "a", prefix + "victim", prefix + "b"}
			err = store.InTx(ctx, d, func(tx any) error {
				for _, k := range keys {
					if _, _, err := l.ScheduleTx(ctx, tx, Effect{Key: k, Kind: prefix + "email"}); err != nil {
						return err
					}
				}
				return nil
			})
			if err != nil {
				t.Fatal(err)
			}
			w, err := NewWorker(l, WorkerConfig[any]{})
			if err != nil {
				t.Fatal(err)
			}
			claimed, err := w.claim(ctx, &kind{name: prefix + "email"}, 10)
			if err != nil || len(claimed) != 3 {
				t.Fatalf("claim: %d, %v", len(claimed), err)
			}
			// Another claimer takes the victim over.
			if _, err := d.Pool().Exec(ctx, `UPDATE `+d.Table("effects")+` SET token = token + 1 WHERE effect_key = $1`, prefix+"victim"); err != nil {
				t.Fatal(err)
			}
			c := newCompleter(l, 10, time.Millisecond)
			batch := make([]completion, len(claimed))
			for i, e := range claimed {
				batch[i] = completion{key: e.Key, token: e.Token, result: []byte("r:" + e.Key), done: make(chan error, 1)}
			}
			c.flush(ctx, batch)
			for _, b := range batch {
				err := <-b.done
				if b.key == prefix+"victim" {
					if !errors.Is(err, idem.ErrLeaseLost) {
						t.Fatalf("broken=%v: the taken-over effect answered %v, want ErrLeaseLost", broken, err)
					}
					if e, _ := l.Get(ctx, b.key); e.State != InProgress || len(e.Result) != 0 {
						t.Fatalf("broken=%v: the taken-over effect was written: %+v", broken, e)
					}
					continue
				}
				if err != nil {
					t.Fatalf("broken=%v: %s answered %v", broken, b.key, err)
				}
				if e, _ := l.Get(ctx, b.key); e.State != Completed || string(e.Result) != "r:"+b.key {
					t.Fatalf("broken=%v: %s not completed: %+v", broken, b.key, e)
				}
			}
		}
	})
}
