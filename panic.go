package idem

import (
	"errors"
	"fmt"
)

// ErrPanic matches the error that stands for a recovered panic of user
// code run by one of idem's runtimes: a consumer's handler, the inbox's
// handlers (Process, ProcessTx, ProcessBatch*), an effect's performer or
// OnFailed hook, a saga's steps and OnDone, a webhook's EnqueueTx. The
// runtime rolls the transaction back, logs the panic with its stack and
// treats it as a transient failure of class "panic" ([ErrorClass]): it is
// retried, and parked as a dead letter once its attempts are exhausted,
// while the process keeps serving the other work.
var ErrPanic = errors.New("idem: panic")

// PanicError is a recovered panic: the value passed to panic and the
// stack of the goroutine at that point. It matches [ErrPanic] with
// [errors.Is]; its text holds the value, not the stack (which is logged).
type PanicError struct {
	Value any    // the value passed to panic
	Stack []byte // runtime/debug.Stack() at the recovery
}

// Error implements error.
func (e *PanicError) Error() string { return fmt.Sprintf("panic: %v", e.Value) }

// Is reports whether target is ErrPanic.
func (e *PanicError) Is(target error) bool { return target == ErrPanic }
