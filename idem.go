// Package idem makes side effects happen once in systems that deliver twice.
//
// Networks lose responses, brokers redeliver, clients retry and operators
// replay: duplicate delivery is normal, duplicate side effects are the bug.
// idem turns at-least-once delivery into effectively-once processing by
// recording every dedup decision through a unique constraint in the caller's
// own database transaction.
//
// The root package holds the shared vocabulary used by every part:
// message identity ([Message]), payload fingerprints ([Fingerprint],
// [CanonicalJSON]), typed errors ([ErrDuplicate], [ErrFingerprintMismatch], …)
// and the retry classification ([Permanent], [IsPermanent], [IsRetryable]).
//
// Feature packages build on it:
//
//   - store, store/pgxstore, store/sqlstore: the storage seam and its drivers
//   - migrate: embedded, versioned schema migrations
//   - inbox: the idempotent consumer
//
// Every API documents what happens on crash, retry and duplicate.
package idem
