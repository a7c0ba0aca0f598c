package idemmysql_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/idemkit/idem/effect"
	"github.com/idemkit/idem/saga"
	"github.com/idemkit/idem/store"
	"github.com/idemkit/idem/store/idemmysql/idemmysqltest"
)

// oneMySQLStep is a definition of one local step, whose OnDone is onDone.
func oneMySQLStep(name string, onDone func(context.Context, *sql.Tx, saga.Saga) error) saga.Definition[*sql.Tx] {
	return saga.Definition[*sql.Tx]{Name: name, OnDone: onDone, Steps: []saga.Step[*sql.Tx]{{
		Name: "note",
		DoTx: func(context.Context, *sql.Tx, saga.Call) ([]byte, error) { return []byte(`{}`), nil },
	}}}
}

// saga.TestAdvancerIsNotHeldBackByStuckSagas on MySQL (Due's list of
// definition names through JSON_TABLE, and Touch): sagas that cannot
// advance, or of a definition the worker does not have, do not hold back
// its other sagas.
func TestSagaAdvancerIsNotHeldBackByStuckSagas(t *testing.T) {
	t.Parallel()
	func() {
		d := store.Driver[*sql.Tx](idemmysqltest.Open(t))
		ctx := context.Background()
		l, err := effect.New(d, effect.Config{})
		if err != nil {
			t.Fatal(err)
		}
		stuck := oneMySQLStep("stuck", func(context.Context, *sql.Tx, saga.Saga) error { return errors.New("ledger unreachable") })
		good := oneMySQLStep("good", nil)
		run := func(s *saga.Sagas[*sql.Tx]) (stop func()) {
			w, err := saga.NewWorker(s, saga.WorkerConfig[*sql.Tx]{Batch: 2, PollInterval: 20 * time.Millisecond,
				Effect: effect.WorkerConfig[*sql.Tx]{PollInterval: 5 * time.Millisecond}})
			if err != nil {
				t.Fatal(err)
			}
			rctx, cancel := context.WithCancel(ctx)
			done := make(chan error, 1)
			go func() { done <- w.Run(rctx) }()
			return func() {
				cancel()
				if err := <-done; err != nil {
					t.Error(err)
				}
			}
		}
		completed := func(s *saga.Sagas[*sql.Tx], id string) {
			t.Helper()
			deadline := time.Now().Add(30 * time.Second)
			for {
				sg, err := s.Get(ctx, id)
				if err != nil {
					t.Fatal(err)
				}
				if sg.State == saga.Completed {
					return
				}
				if time.Now().After(deadline) {
					t.Fatalf("saga %s is %s, want completed", id, sg.State)
				}
				time.Sleep(10 * time.Millisecond)
			}
		}

		both, err := saga.New(d, l, saga.Config{}, stuck, good)
		if err != nil {
			t.Fatal(err)
		}
		for i := range 3 {
			if _, _, err := both.Start(ctx, "stuck", fmt.Sprintf("stuck-%d", i), []byte(`{}`)); err != nil {
				t.Fatal(err)
			}
		}
		stop := run(both)
		waitForStuck := time.Now().Add(30 * time.Second)
		for { // the stuck sagas' steps done: they are due, and fail to finish
			n := countRows(t, d, `SELECT count(*) FROM `+d.Table("effects")+` WHERE state = 'completed'`)
			if n == 3 {
				break
			}
			if time.Now().After(waitForStuck) {
				t.Fatalf("%d steps of the stuck sagas done, want 3", n)
			}
			time.Sleep(10 * time.Millisecond)
		}
		if _, _, err := both.Start(ctx, "good", "good-1", []byte(`{}`)); err != nil {
			t.Fatal(err)
		}
		completed(both, "good-1") // behind a full batch of stuck sagas
		stop()

		// A worker without the stuck sagas' definition.
		only, err := saga.New(d, l, saga.Config{}, good)
		if err != nil {
			t.Fatal(err)
		}
		stop = run(only)
		defer stop()
		if _, _, err := only.Start(ctx, "good", "good-2", []byte(`{}`)); err != nil {
			t.Fatal(err)
		}
		completed(only, "good-2")
		for i := range 3 {
			if sg, err := only.Get(ctx, fmt.Sprintf("stuck-%d", i)); err != nil || sg.State != saga.Running {
				t.Errorf("stuck-%d: %+v, %v; want still running", i, sg.State, err)
			}
		}
	}()
}

func countRows(t *testing.T, d store.Driver[*sql.Tx], q string) int {
	t.Helper()
	var n int
	if err := d.Pool().QueryRow(context.Background(), q).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}
