package saga_test

import (
	"context"
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/effect"
	"github.com/idemkit/idem/internal/errtext/errtexttest"
	"github.com/idemkit/idem/internal/testdb"
	"github.com/idemkit/idem/saga"
	"github.com/idemkit/idem/store"
)

// textSagas returns Sagas with a two-step definition "text": "first" does
// nothing, "pay" fails for good with payErr.
func textSagas(t *testing.T, d store.Driver[any], payErr error, onDone func(ctx context.Context, tx any, sg saga.Saga) error) (*saga.Sagas[any], *saga.Worker[any]) {
	t.Helper()
	l, err := effect.New(d, effect.Config{})
	if err != nil {
		t.Fatal(err)
	}
	nothing := func(context.Context, any, saga.Call) ([]byte, error) { return nil, nil }
	s, err := saga.New(d, l, saga.Config{}, saga.Definition[any]{Name: "text", OnDone: onDone, Steps: []saga.Step[any]{
		{Name: "first", DoTx: nothing, UndoTx: nothing},
		{Name: "pay", Do: func(context.Context, saga.Call) ([]byte, error) { return nil, payErr }},
	}})
	if err != nil {
		t.Fatal(err)
	}
	w, err := saga.NewWorker(s, saga.WorkerConfig[any]{Effect: effect.WorkerConfig[any]{
		PollInterval: 10 * time.Millisecond, MaxAttempts: 2,
		Backoff: func(int) time.Duration { return 10 * time.Millisecond },
	}, PollInterval: 10 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	return s, w
}

func runSagaWorker(t *testing.T, w *saga.Worker[any]) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- w.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run: %v", err)
		}
	})
}

func waitSaga(t *testing.T, s *saga.Sagas[any], id string, want saga.State) saga.Saga {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for {
		sg, err := s.Get(context.Background(), id)
		if err == nil && sg.State == want {
			return sg
		}
		if time.Now().After(deadline) {
			t.Fatalf("saga %s: %+v (%v), want %s", id, sg, err, want)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// A step's error text with a NUL byte and a rune across byte 2,000, and an
// operator's abort reason with a NUL byte, are stored cleaned and capped
// as the saga's last error. Before, PostgreSQL refused both writes: the
// step's failure was never recorded (the saga waited forever) and Abort
// failed.
func TestSagaErrorTextIsStorable(t *testing.T) {
	t.Parallel()
	testdb.EachDriver(t, func(t *testing.T, e testdb.Driver) {
		ctx := context.Background()
		payErr := idem.Permanent(errors.New(errtexttest.Text("step pay failed: permanent: ") + strings.Repeat("y", 10_000)))
		s, w := textSagas(t, e.D, payErr, nil)
		reason := "customer \x00asked " + strings.Repeat("z", 10_000)
		if _, _, err := s.Start(ctx, "text", "aborted-1", []byte(`{}`)); err != nil {
			t.Fatal(err)
		}
		if err := s.Abort(ctx, "aborted-1", reason); err != nil {
			t.Fatalf("Abort with a NUL in the reason: %v", err)
		}
		if _, _, err := s.Start(ctx, "text", "failing-1", []byte(`{}`)); err != nil {
			t.Fatal(err)
		}
		runSagaWorker(t, w)
		sg := waitSaga(t, s, "failing-1", saga.Compensated)
		errtexttest.Check(t, "saga's last error", sg.LastError, "step pay failed: "+payErr.Error())
		sg = waitSaga(t, s, "aborted-1", saga.Compensated)
		errtexttest.Check(t, "aborted saga's last error", sg.LastError, "aborted: "+reason)
	})
}

// An OnDone that panics rolls the saga's last transition back and is
// retried on the next advance, while the worker goes on. Before, the panic
// killed the worker's process.
func TestSagaOnDonePanicIsRetried(t *testing.T) {
	t.Parallel()
	testdb.EachDriver(t, func(t *testing.T, e testdb.Driver) {
		var calls atomic.Int64
		s, w := textSagas(t, e.D, idem.Permanent(errors.New("declined")), func(context.Context, any, saga.Saga) error {
			if calls.Add(1) == 1 {
				panic("OnDone bug")
			}
			return nil
		})
		if _, _, err := s.Start(context.Background(), "text", "done-1", []byte(`{}`)); err != nil {
			t.Fatal(err)
		}
		runSagaWorker(t, w)
		waitSaga(t, s, "done-1", saga.Compensated)
		if n := calls.Load(); n != 2 {
			t.Errorf("OnDone ran %d times, want 2 (the panicking run rolled back, then the retry)", n)
		}
	})
}
