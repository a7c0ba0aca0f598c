package idemgrpc_test

import (
	"context"
	"errors"
	"fmt"
	"net"
	"sync"
	"sync/atomic"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/dynamicpb"

	"github.com/idemkit/idem/idemgrpc"
	"github.com/idemkit/idem/idemgrpc/internal/testsvc"
	"github.com/idemkit/idem/idemhttp"
	"github.com/idemkit/idem/internal/testdb"
	"github.com/idemkit/idem/store"
	"github.com/idemkit/idem/store/idemmysql/idemmysqltest"
)

// ordersTable is the business table the handler writes.
const ordersTable = `CREATE TABLE orders (tenant text NOT NULL, idem_key text NOT NULL, item text NOT NULL, exec integer NOT NULL)`

// app implements testsvc.Handler: Create inserts one row into orders (on
// the call's transaction in transactional mode, on the pool in two-phase
// mode) and answers an Order naming the execution number, so a second
// execution would be visible in the response.
type app struct {
	d     store.Driver[any]
	execs atomic.Int64
	// before, if set, runs first; an error is the call's answer (nothing
	// inserted).
	before func(ctx context.Context, n int64, item string) error
	// after, if set, runs after the insert (to block, or to crash).
	after func(ctx context.Context, n int64)

	mu   sync.Mutex
	keys []string // the key of every execution
}

func (a *app) Create(ctx context.Context, in proto.Message) (proto.Message, error) {
	n := a.execs.Add(1)
	key := idemgrpc.Key(ctx)
	a.mu.Lock()
	a.keys = append(a.keys, key)
	a.mu.Unlock()
	item := testsvc.String(in, "item")
	if a.before != nil {
		if err := a.before(ctx, n, item); err != nil {
			return nil, err
		}
	}
	q := a.d.Pool()
	if tx, ok := idemgrpc.Tx[any](ctx); ok {
		q = a.d.Tx(tx)
	}
	if _, err := q.Exec(ctx, `INSERT INTO orders (tenant, idem_key, item, exec) VALUES ($1, $2, $3, $4)`,
		idemhttp.Tenant(ctx), key, item, n); err != nil {
		return nil, err
	}
	if a.after != nil {
		a.after(ctx, n)
	}
	return testsvc.NewOrder(fmt.Sprintf("ord-%d", n), item, n, key), nil
}

func (a *app) Get(_ context.Context, in proto.Message) (proto.Message, error) {
	return testsvc.NewOrder(testsvc.String(in, "id"), "", 0, ""), nil
}

func (a *app) seenKeys() []string {
	a.mu.Lock()
	defer a.mu.Unlock()
	return append([]string(nil), a.keys...)
}

// tenantMD is the tests' Config.Tenant: the x-tenant metadata, "" when
// absent.
func tenantMD(ctx context.Context) (string, error) {
	md, _ := metadata.FromIncomingContext(ctx)
	if v := md.Get("x-tenant"); len(v) > 0 {
		if v[0] == "nobody" {
			return "", errors.New("unknown tenant")
		}
		return v[0], nil
	}
	return "", nil
}

// serve starts a gRPC server on loopback with the idempotency interceptor
// (after outer, when given) in front of a, and returns a client
// connection made with dial.
func serve(t *testing.T, d store.Driver[any], cfg idemgrpc.Config, a *app, outer []grpc.UnaryServerInterceptor, dial ...grpc.DialOption) *grpc.ClientConn {
	t.Helper()
	if cfg.Tenant == nil {
		cfg.Tenant = tenantMD
	}
	ic, err := idemgrpc.UnaryServerInterceptor(d, cfg)
	if err != nil {
		t.Fatal(err)
	}
	srv := grpc.NewServer(grpc.ChainUnaryInterceptor(append(outer, ic)...))
	a.d = d
	desc, impl := testsvc.GRPC(a)
	srv.RegisterService(desc, impl)
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go func() { _ = srv.Serve(lis) }()
	t.Cleanup(srv.Stop)
	return dialConn(t, lis.Addr().String(), dial...)
}

func dialConn(t *testing.T, addr string, dial ...grpc.DialOption) *grpc.ClientConn {
	t.Helper()
	conn, err := grpc.NewClient(addr, append([]grpc.DialOption{grpc.WithTransportCredentials(insecure.NewCredentials())}, dial...)...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	return conn
}

// withKey returns ctx carrying key (and tenant, when not "") as outgoing
// metadata.
func withKey(ctx context.Context, key, tenant string) context.Context {
	if key != "" {
		ctx = metadata.AppendToOutgoingContext(ctx, idemgrpc.MetadataKey, key)
	}
	if tenant != "" {
		ctx = metadata.AppendToOutgoingContext(ctx, "x-tenant", tenant)
	}
	return ctx
}

// reply is one call's answer.
type reply struct {
	order   *dynamicpb.Message
	header  metadata.MD
	trailer metadata.MD
	err     error
}

func (r reply) replayed() bool {
	v := r.header.Get(idemgrpc.MetadataReplayed)
	return len(v) == 1 && v[0] == "true"
}

func create(ctx context.Context, conn *grpc.ClientConn, req proto.Message) reply {
	var r reply
	r.order = dynamicpb.NewMessage(testsvc.Order)
	r.err = conn.Invoke(ctx, testsvc.Create, req, r.order, grpc.Header(&r.header), grpc.Trailer(&r.trailer))
	return r
}

// eachDriver runs body on every store idemhttp supports (SQLite always;
// pgx and database/sql on PostgreSQL when IDEM_TEST_POSTGRES_URL is set,
// MySQL when IDEM_TEST_MYSQL_URL is; each skips with a message
// otherwise), each with a fresh orders table.
func eachDriver(t *testing.T, body func(t *testing.T, d testdb.Driver)) {
	t.Helper()
	testdb.EachDriver(t, func(t *testing.T, d testdb.Driver) {
		testdb.Exec(t, d.D, ordersTable)
		body(t, d)
	})
	t.Run("mysql", func(t *testing.T) {
		t.Parallel()
		native := idemmysqltest.Open(t)
		d := testdb.Driver{Name: "mysql", D: testdb.Erase(native), Native: native}
		testdb.Exec(t, d.D, ordersTable)
		body(t, d)
	})
}

func rows(t *testing.T, d store.Driver[any]) int {
	t.Helper()
	return testdb.Count(t, d, `SELECT count(*) FROM orders`)
}
