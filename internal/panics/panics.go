// Package panics recovers the panics of user code that idem's runtimes
// run (handlers, performers, hooks), so that one bad message or effect
// cannot crash-loop the process: the panic becomes an *idem.PanicError
// (class "panic"), logged at ERROR with its stack, and the caller rolls
// back and retries it like any other error.
package panics

import (
	"context"
	"log/slog"
	"runtime/debug"

	"github.com/idemkit/idem"
)

// Call runs fn and returns its error. If fn panics, Call recovers and
// returns an *idem.PanicError with the panic's value and stack, after
// logging it on log (when not nil) at ERROR as msg with attrs, "panic"
// (the value) and "stack". A panic is not recovered twice: an error fn
// returns, a PanicError from a nested Call included, is returned as is.
func Call(ctx context.Context, log *slog.Logger, msg string, fn func() error, attrs ...any) (err error) {
	defer func() {
		if p := recover(); p != nil {
			pe := &idem.PanicError{Value: p, Stack: debug.Stack()}
			if log != nil {
				log.ErrorContext(ctx, msg, append(attrs, "panic", pe.Error(), "stack", string(pe.Stack))...)
			}
			err = pe
		}
	}()
	return fn()
}
