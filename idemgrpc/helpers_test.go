package idemgrpc_test

import (
	"context"
	"errors"
	"net"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/dynamicpb"

	"github.com/idemkit/idem/idemgrpc"
	"github.com/idemkit/idem/idemgrpc/internal/testsvc"
	"github.com/idemkit/idem/internal/testdb"
	"github.com/idemkit/idem/store"
	"github.com/idemkit/idem/store/idemmysql/idemmysqltest"
)

// The shared test service.
const ordersTable = testsvc.OrdersTable

type app = testsvc.App

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
	a.D = d
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

func eachDriver(t *testing.T, body func(t *testing.T, d testdb.Driver)) {
	t.Helper()
	testsvc.EachDriver(t, body, mysqlStore)
}

// mysqlStore is MySQL, when IDEM_TEST_MYSQL_URL is set.
var mysqlStore = testsvc.Extra{Name: "mysql", Open: func(t testing.TB) store.Driver[any] {
	return testdb.Erase(idemmysqltest.Open(t))
}}

func rows(t *testing.T, d store.Driver[any]) int {
	t.Helper()
	return testsvc.Rows(t, d)
}
