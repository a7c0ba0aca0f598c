package idemhttp

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/internal/fingerprint"
	"github.com/idemkit/idem/internal/lease"
	"github.com/idemkit/idem/internal/sqlset"
	"github.com/idemkit/idem/store"
)

// State is the state of a key record.
type State string

// Record states: the lease vocabulary (internal/lease) every leased table
// stores.
const (
	// StateInProgress: an execution owns the key (in two-phase mode until
	// LockedUntil).
	StateInProgress State = lease.InProgress
	// StateCompleted: the response is stored and replayed.
	StateCompleted State = lease.Completed
	// StateFailed: an abandoned two-phase execution held for an operator
	// (Hold policy).
	StateFailed State = lease.Failed
)

// Record is one stored idempotency key record.
type Record struct {
	Tenant      string
	Operation   string
	Key         string
	Fingerprint idem.Fingerprint
	State       State
	// Token is the fencing token, incremented on every takeover.
	Token int64
	// Status, Header and Body are the stored response (completed only).
	Status int
	Header http.Header
	Body   []byte
	// BodyOmitted reports a body above Config.MaxStoredBody, not stored.
	BodyOmitted  bool
	ResourceType string
	ResourceID   string
	CreatedAt    time.Time
	LockedUntil  time.Time // two-phase lease end; zero otherwise
	CompletedAt  time.Time
	ExpiresAt    time.Time
}

// Expired reports whether the record is past its retention at now, and so
// treated as absent.
func (r *Record) Expired(now time.Time) bool { return !now.Before(r.ExpiresAt) }

type scope struct{ tenant, operation, key string }

func (s scope) args(more ...any) []any {
	a := make([]any, 0, 3+len(more)) // one allocation for the whole list
	a = append(a, s.tenant, s.operation, s.key)
	return append(a, more...)
}

func (s scope) String() string { return s.tenant + "/" + s.operation + "/" + s.key }

// load reads a record with q (Load); found is false when there is none.
func load(ctx context.Context, q store.Querier, k *sqlset.HTTPKeys, s scope) (*Record, bool, error) {
	rec := &Record{Tenant: s.tenant, Operation: s.operation, Key: s.key}
	err := scanRecord(q.QueryRow(ctx, k.Load, s.args()...), rec)
	if errors.Is(err, store.ErrNoRows) {
		return nil, false, nil
	}
	if err != nil {
		return nil, false, err
	}
	return rec, true, nil
}

// scanRecord scans the record columns of Load (after dest, the columns
// that precede them, such as ListHeld's scope) into rec.
func scanRecord(row store.Row, rec *Record, dest ...any) error {
	// One value for every scan target: they escape to the heap together
	// (one allocation, not one each).
	var c struct {
		fp                                 []byte
		state, headers                     string
		status, omitted                    int64
		created, locked, completed, expire int64
	}
	err := row.Scan(append(dest, &c.fp, &c.state, &rec.Token, &c.status, &c.headers, &rec.Body,
		&c.omitted, &rec.ResourceType, &rec.ResourceID, &c.created, &c.locked, &c.completed, &c.expire)...)
	if err != nil {
		return err
	}
	s := scope{rec.Tenant, rec.Operation, rec.Key}
	if rec.Fingerprint, err = fingerprint.FromBytes(c.fp); err != nil {
		return fmt.Errorf("idemhttp: stored fingerprint of %s: %w", s, err)
	}
	rec.State = State(c.state)
	rec.Status = int(c.status)
	rec.BodyOmitted = c.omitted != 0
	rec.Header = http.Header{}
	if c.headers != "" {
		if err := decodeHeaders(c.headers, rec.Header); err != nil {
			return fmt.Errorf("idemhttp: stored headers of %s: %w", s, err)
		}
	}
	rec.CreatedAt, rec.LockedUntil = store.FromMicros(c.created), store.FromMicros(c.locked)
	rec.CompletedAt, rec.ExpiresAt = store.FromMicros(c.completed), store.FromMicros(c.expire)
	return nil
}

// Lookup returns the record of (tenant, operation, key) whatever its state
// or expiry (check [Record.Expired]); an error wrapping idem.ErrNotFound
// when there is none, or idem.ErrInvalidInput when the tenant, operation or
// key could never be stored (NUL, invalid UTF-8, too long). It runs outside any transaction.
func Lookup[TTx any](ctx context.Context, d store.Driver[TTx], tenant, operation, key string) (*Record, error) {
	s := scope{tenant, operation, key}
	if err := s.check(); err != nil {
		return nil, err
	}
	rec, ok, err := load(ctx, d.Pool(), &d.Statements().HTTPKeys, s)
	if err != nil {
		return nil, err
	}
	if !ok {
		return nil, fmt.Errorf("%w: idempotency key %s", idem.ErrNotFound, s)
	}
	return rec, nil
}

// Forget deletes the record of (tenant, operation, key): the next request
// with that key executes as new. It is the operator's way to resolve a key
// held for reconciliation. Forgetting a completed key lets a retry execute
// again — only do it when the effect is known not to have happened. A key
// whose execution is in progress with a live lease is not forgotten: a
// retry would run beside that execution. It returns an error wrapping
// idem.ErrInProgress then (wait for the execution to finish, or for its
// lease to run out and the key to be held), one wrapping idem.ErrNotFound
// when there was no record, or idem.ErrInvalidInput as [Lookup] does.
func Forget[TTx any](ctx context.Context, d store.Driver[TTx], tenant, operation, key string) error {
	return forget(ctx, d, tenant, operation, key, time.Now())
}

// forget is Forget at now.
func forget[TTx any](ctx context.Context, d store.Driver[TTx], tenant, operation, key string, now time.Time) error {
	s := scope{tenant, operation, key}
	if err := s.check(); err != nil {
		return err
	}
	var rec *Record
	for range 3 { // the execution may end between the delete and the read
		n, err := d.Pool().Exec(ctx, d.Statements().HTTPKeys.Forget, tenant, operation, key, store.Micros(now))
		if err != nil {
			return err
		}
		if n > 0 {
			return nil
		}
		r, found, err := load(ctx, d.Pool(), &d.Statements().HTTPKeys, s)
		if err != nil {
			return err
		}
		if !found {
			return fmt.Errorf("%w: idempotency key %s", idem.ErrNotFound, s)
		}
		if rec = r; rec.State == StateInProgress && rec.LockedUntil.After(now) {
			break
		}
	}
	if rec.State != StateInProgress || !rec.LockedUntil.After(now) {
		return fmt.Errorf("idemhttp: idempotency key %s: its record kept changing while it was being forgotten (state %s); try again", s, rec.State)
	}
	return fmt.Errorf("%w: idempotency key %s is being executed (lease until %s): forgetting it would let a retry run beside it; "+
		"wait for it to finish, or for its lease to run out and the key to be held", idem.ErrInProgress, s,
		rec.LockedUntil.UTC().Format(time.RFC3339))
}

// Limits of the scope of a key, in bytes. With [idem.MaxKeyLen] they keep
// the primary key of a record within what a PostgreSQL B-tree index entry
// can hold (about 2.7 kB) and InnoDB's 3072-byte index key; MySQL's
// columns are this wide since its migration 0016. A dialect that holds
// less declares it (sqlset.Limits) and the middleware refuses a longer
// scope with the same answers, before the store.
const (
	// MaxTenantLen is the longest tenant Config.Tenant may return; a
	// longer one answers 401.
	MaxTenantLen = 512
	// MaxOperationLen is the longest operation; a longer one (for example
	// a very long path when the middleware runs before routing) answers
	// 400.
	MaxOperationLen = 1024
)

// checkText reports whether s can be stored as a scope column on every
// dialect: valid UTF-8, no NUL, at most max bytes. PostgreSQL text
// rejects NUL and invalid UTF-8 with an error, which must never surface as
// a store failure for what is client input. Errors wrap
// idem.ErrInvalidInput.
func checkText(what, s string, max int) error {
	switch {
	case len(s) > max:
		return fmt.Errorf("%w: %s of %d bytes exceeds %d", idem.ErrInvalidInput, what, len(s), max)
	case strings.IndexByte(s, 0) >= 0:
		return fmt.Errorf("%w: %s contains NUL", idem.ErrInvalidInput, what)
	case !utf8.ValidString(s):
		return fmt.Errorf("%w: %s is not valid UTF-8", idem.ErrInvalidInput, what)
	}
	return nil
}

func (s scope) check() error {
	if err := checkText("tenant", s.tenant, MaxTenantLen); err != nil {
		return err
	}
	if err := checkText("operation", s.operation, MaxOperationLen); err != nil {
		return err
	}
	return checkKey(s.key)
}
