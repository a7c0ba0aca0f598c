package idem_test

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/consumer"
	"github.com/idemkit/idem/effect"
	"github.com/idemkit/idem/outbox"
	"github.com/idemkit/idem/retention"
	"github.com/idemkit/idem/saga"
)

// Every long-running part of idem is a Runner, so idem.Run starts them all.
var _ = []idem.Runner{
	(*outbox.Relay[any])(nil), (*consumer.Consumer[any])(nil), (*effect.Worker[any])(nil),
	(*saga.Worker[any])(nil), (*retention.GC[any])(nil),
}

var quiet = slog.New(slog.NewTextHandler(io.Discard, nil))

// blockUntilDone is a runner that works until cancelled and counts it.
func blockUntilDone(cancelled *atomic.Int32) idem.RunFunc {
	return func(ctx context.Context) error {
		<-ctx.Done()
		cancelled.Add(1)
		return nil
	}
}

func TestServiceFirstErrorCancelsTheRest(t *testing.T) {
	t.Parallel()
	var cancelled atomic.Int32
	boom := errors.New("broker gone")
	s := idem.Service{Logger: quiet, Runners: []idem.Runner{
		blockUntilDone(&cancelled),
		idem.RunFunc(func(ctx context.Context) error { time.Sleep(10 * time.Millisecond); return boom }),
		blockUntilDone(&cancelled),
	}}
	err := s.Run(context.Background())
	if !errors.Is(err, boom) {
		t.Fatalf("Run = %v, want the failing runner's error", err)
	}
	if cancelled.Load() != 2 {
		t.Fatalf("%d runners were cancelled, want the other 2", cancelled.Load())
	}
}

func TestServicePanicIsAnError(t *testing.T) {
	t.Parallel()
	var cancelled atomic.Int32
	s := idem.Service{Logger: quiet, Runners: []idem.Runner{
		blockUntilDone(&cancelled),
		idem.RunFunc(func(context.Context) error { panic("handler bug") }),
	}}
	err := s.Run(context.Background())
	if err == nil || !strings.Contains(err.Error(), "panicked: handler bug") || !strings.Contains(err.Error(), "run_test.go") {
		t.Fatalf("Run = %v, want the panic with its stack", err)
	}
	if cancelled.Load() != 1 {
		t.Fatal("the other runner was not cancelled")
	}
}

func TestServiceStopsCleanlyOnCancel(t *testing.T) {
	t.Parallel()
	var cancelled atomic.Int32
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		done <- idem.Run(ctx, blockUntilDone(&cancelled), blockUntilDone(&cancelled),
			idem.RunFunc(func(context.Context) error { return nil })) // finishes at once; the others go on
	}()
	time.Sleep(20 * time.Millisecond)
	select {
	case err := <-done:
		t.Fatalf("Run returned %v before it was cancelled", err)
	default:
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("Run = %v, want nil after a clean stop", err)
	}
	if cancelled.Load() != 2 {
		t.Fatalf("%d runners stopped, want 2", cancelled.Load())
	}
}

func TestServiceStopIsBounded(t *testing.T) {
	t.Parallel()
	release := make(chan struct{})
	defer close(release)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Millisecond)
	defer cancel()
	s := idem.Service{Logger: quiet, StopTimeout: 50 * time.Millisecond, Runners: []idem.Runner{
		idem.RunFunc(func(context.Context) error { <-release; return nil }), // ignores its context
	}}
	start := time.Now()
	err := s.Run(ctx)
	if !errors.Is(err, idem.ErrStopTimeout) {
		t.Fatalf("Run = %v, want ErrStopTimeout", err)
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Fatalf("Run took %v despite a 50ms StopTimeout", d)
	}
}

func TestServiceRefusesNoRunners(t *testing.T) {
	t.Parallel()
	for _, s := range []idem.Service{{}, {Runners: []idem.Runner{nil}}} {
		if err := s.Run(context.Background()); !errors.Is(err, idem.ErrInvalidOption) {
			t.Errorf("Run with %v = %v, want ErrInvalidOption", s.Runners, err)
		}
	}
}
