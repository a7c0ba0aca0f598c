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

// ErrNotHeld reports an operator resolve or release of a key record that is
// not held for reconciliation (state failed): nothing was done.
var ErrNotHeld = errors.New("idemhttp: key is not held for reconciliation")

// ListHeld returns up to limit records (defaults to 100 when ≤ 0) held for
// reconciliation: two-phase executions whose lease ran out under the Hold
// policy (state failed), oldest first. Nobody knows whether their handler's
// effect happened; an operator checks and then calls [ResolveHeld] or
// [ReleaseHeld].
func ListHeld[TTx any](ctx context.Context, d store.Driver[TTx], limit int) ([]*Record, error) {
	if limit <= 0 {
		limit = 100
	}
	rows, err := d.Pool().Query(ctx, d.Statements().HTTPKeys.ListHeld, limit)
	if err != nil {
		return nil, fmt.Errorf("idemhttp: list held: %w", err)
	}
	defer rows.Close()
	var out []*Record
	for rows.Next() {
		rec := &Record{}
		if err := scanRecord(rows, rec, &rec.Tenant, &rec.Operation, &rec.Key); err != nil {
			return nil, err
		}
		out = append(out, rec)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("idemhttp: list held: %w", err)
	}
	if out == nil {
		out = []*Record{}
	}
	return out, nil
}

// Resolution is an operator's resolution of a held record with
// [ResolveHeld]: the record's scope and the response later retries with the
// key get replayed.
type Resolution struct {
	Tenant, Operation, Key string
	// Status is the response's HTTP status, 100 to 599.
	Status int
	// Header and Body are the response's; nil stores none.
	Header http.Header
	Body   []byte
	// CompletedAt is stored as the record's completion time.
	CompletedAt time.Time
}

// ResolveHeld completes a held record with an operator-supplied response
// (the operator found that the effect did happen): later retries with the
// key get r's status, header and body replayed, and the handler never runs
// again for it. A record that is not held is refused with [ErrNotHeld]
// (an unknown one with idem.ErrNotFound). The fencing token is bumped, so a
// late original execution can no longer complete it.
func ResolveHeld[TTx any](ctx context.Context, d store.Driver[TTx], r Resolution) error {
	s := scope{r.Tenant, r.Operation, r.Key}
	if err := s.check(); err != nil {
		return err
	}
	if r.Status < 100 || r.Status > 599 {
		return fmt.Errorf("%w: status %d", idem.ErrInvalidInput, r.Status)
	}
	header, body := r.Header, r.Body
	if header == nil {
		header = http.Header{}
	}
	hj, err := json.Marshal(header)
	if err != nil {
		return err
	}
	if body == nil {
		body = []byte{}
	}
	n, err := d.Pool().Exec(ctx, d.Statements().HTTPKeys.ResolveHeld, s.args(r.Status, string(hj), body, store.Micros(r.CompletedAt))...)
	if err != nil {
		return fmt.Errorf("idemhttp: resolve %s: %w", s, err)
	}
	if n == 0 {
		return heldWhyNot(ctx, d, s)
	}
	return nil
}

// ReleaseHeld deletes a held record (the operator found that the effect did
// not happen): the next request with the key executes as new. A record that
// is not held is refused with [ErrNotHeld], so a completed response is
// never forgotten by a stale release; use [Forget] for that.
func ReleaseHeld[TTx any](ctx context.Context, d store.Driver[TTx], tenant, operation, key string) error {
	s := scope{tenant, operation, key}
	if err := s.check(); err != nil {
		return err
	}
	n, err := d.Pool().Exec(ctx, d.Statements().HTTPKeys.ReleaseHeld, s.args()...)
	if err != nil {
		return fmt.Errorf("idemhttp: release %s: %w", s, err)
	}
	if n == 0 {
		return heldWhyNot(ctx, d, s)
	}
	return nil
}

func heldWhyNot[TTx any](ctx context.Context, d store.Driver[TTx], s scope) error {
	rec, err := Lookup(ctx, d, s.tenant, s.operation, s.key)
	if err != nil {
		return err
	}
	return fmt.Errorf("%w: %s is %s", ErrNotHeld, s, rec.State)
}
