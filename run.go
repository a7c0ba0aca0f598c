package idem

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"runtime/debug"
	"sync"
	"time"
)

// Runner is a long-running part of a service: an outbox relay, a consumer,
// an effect or saga worker, a retention GC. Run works until ctx is done and
// then returns nil, or returns the error that stopped it. Every such type of
// idem's implements it.
type Runner interface {
	Run(ctx context.Context) error
}

// RunFunc adapts a function to [Runner], for a part of the service that is
// not idem's (an HTTP server's serve loop, say).
type RunFunc func(ctx context.Context) error

// Run calls f(ctx).
func (f RunFunc) Run(ctx context.Context) error { return f(ctx) }

// DefaultStopTimeout is how long [Service.Run] waits for its runners to
// return once it has cancelled them, when StopTimeout is zero.
const DefaultStopTimeout = 30 * time.Second

// ErrStopTimeout reports runners that did not return within the service's
// StopTimeout after they were cancelled.
var ErrStopTimeout = errors.New("idem: runners did not stop in time")

// Service runs a service's runners together: every runner in its own
// goroutine, the first error (or panic) cancels the others, and the stop is
// bounded. What each runner guarantees on a crash is its own (a relay
// republishes what it had not marked, a consumer's broker redelivers what it
// had not acknowledged): stopping them together loses nothing.
type Service struct {
	// Runners are the parts to run. A runner that returns nil before the
	// service is cancelled has finished; the others go on.
	Runners []Runner
	// StopTimeout bounds the wait for the runners to return after the
	// service's context is done or a runner failed. Defaults to
	// DefaultStopTimeout.
	StopTimeout time.Duration
	// Logger receives a line when a runner fails or panics. Defaults to
	// slog.Default().
	Logger *slog.Logger
}

// Run is (&Service{Runners: runners}).Run(ctx): it runs the runners until
// ctx is done or one of them fails, and returns the first error.
//
//	err := idem.Run(ctx, relay, orders, emails, gc)
func Run(ctx context.Context, runners ...Runner) error {
	return (&Service{Runners: runners}).Run(ctx)
}

// Run starts every runner and returns when all have returned: nil when ctx
// was cancelled and each stopped cleanly, else the first runner's error
// (a panic is recovered and returned as an error with its stack), joined
// with [ErrStopTimeout] when some runners did not return within
// StopTimeout after the cancellation (they are left running; the process
// is expected to exit).
func (s *Service) Run(ctx context.Context) error {
	if len(s.Runners) == 0 {
		return fmt.Errorf("%w: idem: Service has no runners", ErrInvalidOption)
	}
	for i, r := range s.Runners {
		if r == nil {
			return fmt.Errorf("%w: idem: Service.Runners[%d] is nil", ErrInvalidOption, i)
		}
	}
	log := s.Logger
	if log == nil {
		log = slog.Default()
	}
	stopTimeout := s.StopTimeout
	if stopTimeout <= 0 {
		stopTimeout = DefaultStopTimeout
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var (
		mu    sync.Mutex
		first error
		wg    sync.WaitGroup
	)
	fail := func(i int, err error) {
		mu.Lock()
		if first == nil {
			first = err
		}
		mu.Unlock()
		log.ErrorContext(ctx, "runner failed; stopping the service", "runner", i, "type", fmt.Sprintf("%T", s.Runners[i]), "error", err)
		cancel()
	}
	for i, r := range s.Runners {
		wg.Go(func() {
			defer func() {
				if p := recover(); p != nil {
					fail(i, fmt.Errorf("idem: runner %d (%T) panicked: %v\n%s", i, r, p, debug.Stack()))
				}
			}()
			if err := r.Run(ctx); err != nil && !(ctx.Err() != nil && errors.Is(err, context.Canceled)) {
				fail(i, fmt.Errorf("idem: runner %d (%T): %w", i, r, err))
			}
		})
	}
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	select {
	case <-done:
	case <-ctx.Done():
		t := time.NewTimer(stopTimeout)
		defer t.Stop()
		select {
		case <-done:
		case <-t.C:
			mu.Lock()
			defer mu.Unlock()
			return errors.Join(first, fmt.Errorf("%w: still running %v after the stop began", ErrStopTimeout, stopTimeout))
		}
	}
	mu.Lock()
	defer mu.Unlock()
	return first
}
