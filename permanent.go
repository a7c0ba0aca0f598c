package idem

import (
	"context"
	"errors"
)

// permanentError marks an error as not worth retrying.
type permanentError struct{ err error }

func (e *permanentError) Error() string { return "permanent: " + e.err.Error() }
func (e *permanentError) Unwrap() error { return e.err }

// Permanent marks err as permanent: retrying the same input can never succeed
// (decode errors, schema violations, business rejections). Consumers send a
// permanent failure to the dead-letter store at once instead of retrying it.
// Permanent(nil) returns nil.
func Permanent(err error) error {
	if err == nil {
		return nil
	}
	if IsPermanent(err) {
		return err
	}
	return &permanentError{err: err}
}

// IsPermanent reports whether err, or any error it wraps, was marked with
// [Permanent], or is [ErrInvalidInput] or [ErrFingerprintMismatch] (both can
// never succeed on retry).
func IsPermanent(err error) bool {
	if err == nil {
		return false
	}
	var p *permanentError
	return errors.As(err, &p) || errors.Is(err, ErrInvalidInput) || errors.Is(err, ErrFingerprintMismatch)
}

// IsRetryable reports whether err is worth retrying: any non-nil error that
// is not permanent and not a cancellation of the caller's own context.
func IsRetryable(err error) bool {
	if err == nil || IsPermanent(err) {
		return false
	}
	return !errors.Is(err, context.Canceled)
}

// ErrorClass names the class of err for metrics and dead letters:
// "panic" (a recovered panic, [ErrPanic]), "permanent",
// "fingerprint_mismatch", "invalid_input", "timeout", "canceled" or
// "transient".
func ErrorClass(err error) string {
	switch {
	case err == nil:
		return ""
	case errors.Is(err, ErrPanic):
		return "panic"
	case errors.Is(err, ErrFingerprintMismatch):
		return "fingerprint_mismatch"
	case errors.Is(err, ErrInvalidInput):
		return "invalid_input"
	case IsPermanent(err):
		return "permanent"
	case errors.Is(err, context.DeadlineExceeded):
		return "timeout"
	case errors.Is(err, context.Canceled):
		return "canceled"
	default:
		return "transient"
	}
}
