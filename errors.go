package idem

import (
	"errors"
	"fmt"
)

// Sentinel errors shared by every idem package. Check them with [errors.Is];
// the packages wrap them with context (consumer, key, message id).
var (
	// ErrDuplicate reports that the message, request or effect was already
	// recorded; the handler did not run again.
	ErrDuplicate = errors.New("idem: duplicate")

	// ErrFingerprintMismatch reports that a key was reused with a different
	// payload. It is never a silent skip: the caller must surface it (HTTP 422,
	// dead letter for a consumer).
	ErrFingerprintMismatch = errors.New("idem: same key, different payload")

	// ErrInProgress reports that another owner holds a live lease on the key.
	// Retry later.
	ErrInProgress = errors.New("idem: in progress")

	// ErrLeaseLost reports that a lease expired and another owner took over;
	// the fencing token no longer matches, so the late finaliser's write was
	// rejected.
	ErrLeaseLost = errors.New("idem: lease lost")

	// ErrNeedsReconciliation reports that an expired record is held for an
	// operator to resolve instead of being executed again.
	ErrNeedsReconciliation = errors.New("idem: needs reconciliation")

	// ErrNotFound reports that a record does not exist (or has expired).
	ErrNotFound = errors.New("idem: not found")

	// ErrInvalidOption reports a configuration error detected by a constructor.
	ErrInvalidOption = errors.New("idem: invalid option")

	// ErrInvalidInput reports input that can never be processed (bad key,
	// malformed message, payload failing validation). It is permanent.
	ErrInvalidInput = errors.New("idem: invalid input")
)

// FingerprintMismatchError carries both fingerprints of a key reused with a
// different payload. It matches [ErrFingerprintMismatch] with [errors.Is].
type FingerprintMismatchError struct {
	Key      string      // the scoped key, e.g. consumer/message id
	Stored   Fingerprint // the fingerprint recorded first
	Received Fingerprint // the fingerprint of the new payload
}

// Error implements error.
func (e *FingerprintMismatchError) Error() string {
	return fmt.Sprintf("idem: key %q reused with a different payload (stored %s, received %s)",
		e.Key, e.Stored.Short(), e.Received.Short())
}

// Is reports whether target is ErrFingerprintMismatch.
func (e *FingerprintMismatchError) Is(target error) bool { return target == ErrFingerprintMismatch }
