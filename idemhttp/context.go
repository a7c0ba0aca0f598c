package idemhttp

import (
	"context"
	"database/sql"
	"fmt"
	"reflect"
	"sync"
	"sync/atomic"
)

type ctxKey struct{}

// reqState is what the middleware knows about one request; the handler
// reads it through the accessors below.
type reqState struct {
	tenant, operation, key string
	tx                     any // the request transaction (transactional mode)
	hasTx                  bool
	txType                 reflect.Type // the driver's TTx, named when Tx is asked for another
	replayed               bool
	executed               bool        // the handler ran (for the span's decision)
	keepPending            atomic.Bool // see KeepPending (keeppending.go)

	mu           sync.Mutex // protects resourceType and resourceID
	resourceType string
	resourceID   string
}

func stateFrom(ctx context.Context) *reqState {
	s, _ := ctx.Value(ctxKey{}).(*reqState)
	return s
}

// Tx returns the request transaction in transactional mode. The handler
// must run its mutations on it and must not commit or roll it back: the
// middleware commits it together with the key record and the stored
// response, or rolls it back (5xx, panic, a status that is not stored). ok
// is false outside the middleware and in two-phase mode.
//
// TTx must be the driver's transaction type: pgx.Tx for the pgxstore
// driver, *sql.Tx for sqlstore and the MySQL driver. Asking for another
// type is a wiring mistake that no request can recover from, so Tx panics
// with a message that names the driver's type (a recovered panic in the
// handler rolls the transaction back).
func Tx[TTx any](ctx context.Context) (TTx, bool) {
	var zero TTx
	s := stateFrom(ctx)
	if s == nil || !s.hasTx {
		return zero, false
	}
	tx, ok := s.tx.(TTx)
	if !ok {
		panic(fmt.Sprintf("idemhttp.Tx[%v]: the store driver's transaction type is %v: call idemhttp.Tx[%v]", reflect.TypeFor[TTx](), s.txType, s.txType))
	}
	return tx, true
}

// SQLTx is Tx[*sql.Tx], for the sqlstore driver (SQLite or PostgreSQL).
func SQLTx(ctx context.Context) (*sql.Tx, bool) { return Tx[*sql.Tx](ctx) }

// Key returns the request's idempotency key, or "" when the request has
// none. Propagate it to downstream calls (as their idempotency key) so a
// re-execution after a crash is deduplicated there too.
func Key(ctx context.Context) string {
	if s := stateFrom(ctx); s != nil {
		return s.key
	}
	return ""
}

// Tenant returns the tenant that scopes the request's key, or "".
func Tenant(ctx context.Context) string {
	if s := stateFrom(ctx); s != nil {
		return s.tenant
	}
	return ""
}

// Operation returns the operation that scopes the request's key, or "".
func Operation(ctx context.Context) string {
	if s := stateFrom(ctx); s != nil {
		return s.operation
	}
	return ""
}

// Replayed reports whether the response for this request is a replay of a
// stored one. The handler never runs for a replay, so inside a handler it
// is false; the ErrorHandler sees it for its request. Middleware placed
// outside this one uses [WithInfo] instead.
func Replayed(ctx context.Context) bool {
	if s := stateFrom(ctx); s != nil {
		return s.replayed
	}
	return false
}

// SetResource records the type and id of the resource the handler created
// (for example "order", "ord_123"); they are stored with the record and
// shown by "idem keys show". Safe for concurrent use; a no-op outside the
// middleware.
func SetResource(ctx context.Context, typ, id string) {
	if s := stateFrom(ctx); s != nil {
		s.mu.Lock()
		s.resourceType, s.resourceID = typ, id
		s.mu.Unlock()
	}
}

type infoKey struct{}

// Info tells middleware placed outside this one (access logs, metrics)
// what happened to a request. Create it with [WithInfo] before calling the
// next handler and read it after that handler returns.
type Info struct {
	Key       string // the parsed idempotency key, "" when none
	Tenant    string
	Operation string
	Executed  bool // the handler ran for this request
	Replayed  bool // a stored response was replayed
}

// WithInfo returns a context carrying an empty Info that the middleware
// fills in for the request served with that context. Not safe to share
// between requests.
func WithInfo(ctx context.Context) (context.Context, *Info) {
	info := &Info{}
	return context.WithValue(ctx, infoKey{}, info), info
}

func infoFrom(ctx context.Context) *Info {
	info, _ := ctx.Value(infoKey{}).(*Info)
	return info
}
