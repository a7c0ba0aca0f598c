package saga_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/idemkit/idem/effect"
	"github.com/idemkit/idem/internal/testdb"
	"github.com/idemkit/idem/saga"
)

// oneStep is a definition of one local step, whose OnDone is onDone.
func oneStep(name string, onDone func(context.Context, any, saga.Saga) error) saga.Definition[any] {
	return saga.Definition[any]{Name: name, OnDone: onDone, Steps: []saga.Step[any]{{
		Name: "note",
		DoTx: func(context.Context, any, saga.Call) ([]byte, error) { return []byte(`{}`), nil },
	}}}
}

// Sagas that cannot advance (an OnDone that keeps failing) or that belong
// to a definition this worker does not have (another deployment's, a
// renamed one) do not hold back the worker's other sagas, however many
// there are: before, the advancer read the oldest due sagas of every
// definition, so a full batch of them came back on every poll, in a loop
// with no pause, and the sagas behind them never advanced.
func TestAdvancerIsNotHeldBackByStuckSagas(t *testing.T) {
	t.Parallel()
	testdb.EachDriver(t, func(t *testing.T, e testdb.Driver) {
		d := e.D
		ctx := context.Background()
		l, err := effect.New(d, effect.Config{})
		if err != nil {
			t.Fatal(err)
		}
		stuck := oneStep("stuck", func(context.Context, any, saga.Saga) error { return errors.New("ledger unreachable") })
		good := oneStep("good", nil)
		run := func(s *saga.Sagas[any]) (stop func()) {
			w, err := saga.NewWorker(s, saga.WorkerConfig[any]{Batch: 2, PollInterval: 20 * time.Millisecond,
				Effect: effect.WorkerConfig[any]{PollInterval: 5 * time.Millisecond}})
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
		completed := func(s *saga.Sagas[any], id string) {
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
			n := testdb.Count(t, d, `SELECT count(*) FROM `+d.Table("effects")+` WHERE state = 'completed'`)
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
	})
}
