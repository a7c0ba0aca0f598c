package testsvc

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"

	"google.golang.org/protobuf/proto"

	"github.com/idemkit/idem/idemhttp"
	"github.com/idemkit/idem/internal/testdb"
	"github.com/idemkit/idem/store"
)

// OrdersTable is the business table App writes.
const OrdersTable = `CREATE TABLE orders (tenant text NOT NULL, idem_key text NOT NULL, item text NOT NULL, exec integer NOT NULL)`

// App implements Handler: Create inserts one row into orders (on the
// call's transaction in transactional mode, on the pool in two-phase mode)
// and answers an Order naming the execution number, so a second execution
// would be visible in the response.
type App struct {
	D     store.Driver[any]
	Execs atomic.Int64
	// Before, if set, runs first; an error is the call's answer (nothing
	// inserted).
	Before func(ctx context.Context, n int64, item string) error
	// After, if set, runs after the insert (to block, or to crash).
	After func(ctx context.Context, n int64)

	mu   sync.Mutex
	keys []string // the key of every execution
}

// Create implements Handler.
func (a *App) Create(ctx context.Context, in proto.Message) (proto.Message, error) {
	n := a.Execs.Add(1)
	key := idemhttp.Key(ctx)
	a.mu.Lock()
	a.keys = append(a.keys, key)
	a.mu.Unlock()
	item := String(in, "item")
	if a.Before != nil {
		if err := a.Before(ctx, n, item); err != nil {
			return nil, err
		}
	}
	q := a.D.Pool()
	if tx, ok := idemhttp.Tx[any](ctx); ok {
		q = a.D.Tx(tx)
	}
	if _, err := q.Exec(ctx, `INSERT INTO orders (tenant, idem_key, item, exec) VALUES ($1, $2, $3, $4)`,
		idemhttp.Tenant(ctx), key, item, n); err != nil {
		return nil, err
	}
	if a.After != nil {
		a.After(ctx, n)
	}
	return NewOrder(fmt.Sprintf("ord-%d", n), item, n, key), nil
}

// Get implements Handler: an Order with the id asked for.
func (a *App) Get(_ context.Context, in proto.Message) (proto.Message, error) {
	return NewOrder(String(in, "id"), "", 0, ""), nil
}

// Keys returns the key of every execution so far.
func (a *App) Keys() []string {
	a.mu.Lock()
	defer a.mu.Unlock()
	return append([]string(nil), a.keys...)
}

// Extra is a store EachDriver runs on besides testdb's (the tests add
// MySQL, whose driver is a module this package does not require).
type Extra struct {
	Name string
	Open func(t testing.TB) store.Driver[any] // migrated, fresh; skips t when unavailable
}

// EachDriver runs body on SQLite always, on pgx and database/sql on
// PostgreSQL when IDEM_TEST_POSTGRES_URL is set (they skip with a message
// otherwise) and on the extra stores, each with a fresh orders table.
func EachDriver(t *testing.T, body func(t *testing.T, d testdb.Driver), extra ...Extra) {
	t.Helper()
	testdb.EachDriver(t, func(t *testing.T, d testdb.Driver) {
		testdb.Exec(t, d.D, OrdersTable)
		body(t, d)
	})
	for _, e := range extra {
		t.Run(e.Name, func(t *testing.T) {
			t.Parallel()
			d := testdb.Driver{Name: e.Name, D: e.Open(t)}
			testdb.Exec(t, d.D, OrdersTable)
			body(t, d)
		})
	}
}

// Rows counts the orders.
func Rows(t *testing.T, d store.Driver[any]) int {
	t.Helper()
	return testdb.Count(t, d, `SELECT count(*) FROM orders`)
}
