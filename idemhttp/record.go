package idemhttp

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"time"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/store"
)

// State is the state of a key record.
type State string

// Record states.
const (
	// StatePending: an execution owns the key (in two-phase mode until
	// LockedUntil).
	StatePending State = "pending"
	// StateCompleted: the response is stored and replayed.
	StateCompleted State = "completed"
	// StateFailed: an abandoned two-phase execution held for an operator
	// (Hold policy).
	StateFailed State = "failed"
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
	return append([]any{s.tenant, s.operation, s.key}, more...)
}

func (s scope) String() string { return s.tenant + "/" + s.operation + "/" + s.key }

// load reads a record; found is false when there is none.
func load(ctx context.Context, q store.Querier, sql string, s scope) (*Record, bool, error) {
	rec := &Record{Tenant: s.tenant, Operation: s.operation, Key: s.key}
	var (
		fp                                 []byte
		state, headers                     string
		status, omitted                    int64
		created, locked, completed, expire int64
	)
	err := q.QueryRow(ctx, sql, s.args()...).Scan(&fp, &state, &rec.Token, &status, &headers, &rec.Body,
		&omitted, &rec.ResourceType, &rec.ResourceID, &created, &locked, &completed, &expire)
	if errors.Is(err, store.ErrNoRows) {
		return nil, false, nil
	}
	if err != nil {
		return nil, false, err
	}
	if rec.Fingerprint, err = idem.FingerprintFromBytes(fp); err != nil {
		return nil, false, err
	}
	rec.State = State(state)
	rec.Status = int(status)
	rec.BodyOmitted = omitted != 0
	rec.Header = http.Header{}
	if headers != "" {
		if err := json.Unmarshal([]byte(headers), &rec.Header); err != nil {
			return nil, false, fmt.Errorf("idemhttp: stored headers of %s: %w", s, err)
		}
	}
	rec.CreatedAt, rec.LockedUntil = store.FromMicros(created), store.FromMicros(locked)
	rec.CompletedAt, rec.ExpiresAt = store.FromMicros(completed), store.FromMicros(expire)
	return rec, true, nil
}

// Lookup returns the record of (tenant, operation, key) whatever its state
// or expiry (check [Record.Expired]); an error wrapping idem.ErrNotFound
// when there is none. It runs outside any transaction.
func Lookup[TTx any](ctx context.Context, d store.Driver[TTx], tenant, operation, key string) (*Record, error) {
	q := newQueries(d.Dialect(), d.Table("idempotency_keys"))
	s := scope{tenant, operation, key}
	rec, ok, err := load(ctx, d.Pool(), q.load, s)
	if err != nil {
		return nil, err
	}
	if !ok {
		return nil, fmt.Errorf("%w: idempotency key %s", idem.ErrNotFound, s)
	}
	return rec, nil
}

// Forget deletes the record of (tenant, operation, key), whatever its
// state: the next request with that key executes as new. It is the
// operator's way to resolve a key held for reconciliation. Forgetting a
// completed key lets a retry execute again — only do it when the effect is
// known not to have happened. Returns an error wrapping idem.ErrNotFound
// when there was no record.
func Forget[TTx any](ctx context.Context, d store.Driver[TTx], tenant, operation, key string) error {
	q := newQueries(d.Dialect(), d.Table("idempotency_keys"))
	s := scope{tenant, operation, key}
	n, err := d.Pool().Exec(ctx, q.forget, s.args()...)
	if err != nil {
		return err
	}
	if n == 0 {
		return fmt.Errorf("%w: idempotency key %s", idem.ErrNotFound, s)
	}
	return nil
}
