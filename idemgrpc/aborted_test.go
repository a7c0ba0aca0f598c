package idemgrpc_test

import (
	"context"
	"net"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"

	"github.com/idemkit/idem/idemgrpc"
	"github.com/idemkit/idem/idemgrpc/internal/testsvc"
	"github.com/idemkit/idem/idemhttp"
	"github.com/idemkit/idem/internal/testdb"
	"github.com/idemkit/idem/store"
)

// A handler whose statement failed in the key's transaction and that then
// answers with a code that is stored (AlreadyExists after a unique
// violation, the common pattern) gets its own answer to the client. On
// PostgreSQL the failed statement aborted the transaction, so the answer
// cannot be stored: it is returned unstored and a retry executes again.
// Before, the client got Unavailable on every attempt. Where the
// transaction survives a failed statement (SQLite, MySQL) the answer is
// stored and replayed as before.
func TestStoredCodeAfterAFailedStatement(t *testing.T) {
	eachDriver(t, func(t *testing.T, d testdb.Driver) {
		a := &app{}
		a.Before = func(ctx context.Context, _ int64, item string) error {
			tx, ok := idemhttp.Tx[any](ctx)
			if !ok {
				return status.Error(codes.Internal, "no transaction")
			}
			q := d.D.Tx(tx)
			_, _ = q.Exec(ctx, `INSERT INTO dup_items (item) VALUES ($1)`, item) // a duplicate: a unique violation
			return status.Error(codes.AlreadyExists, "item "+item+" exists")
		}
		if _, err := d.D.Pool().Exec(context.Background(), `CREATE TABLE dup_items (item varchar(64) PRIMARY KEY)`); err != nil {
			t.Fatal(err)
		}
		if _, err := d.D.Pool().Exec(context.Background(), `INSERT INTO dup_items (item) VALUES ('pen')`); err != nil {
			t.Fatal(err)
		}
		conn := serve(t, d.D, idemgrpc.Config{}, a, nil)
		ctx := withKey(t.Context(), "k-dup", "")
		first := create(ctx, conn, testsvc.NewCreate("pen", 1, nil))
		wantCode(t, first.err, codes.AlreadyExists, "")
		second := create(ctx, conn, testsvc.NewCreate("pen", 1, nil))
		wantCode(t, second.err, codes.AlreadyExists, "")
		aborts := d.D.Dialect() == store.Postgres
		if second.replayed() == aborts {
			t.Fatalf("retry replayed %v, want %v (the transaction aborts: %v)", second.replayed(), !aborts, aborts)
		}
	})
}

// The health checking service passes through without a key: probes never
// send one. Before, a server-wide interceptor answered InvalidArgument and
// the pods never became ready.
func TestHealthCheckNeedsNoKey(t *testing.T) {
	d := testdb.Erase(testdb.SQLite(t))
	ic, err := idemgrpc.UnaryServerInterceptor(d, idemgrpc.Config{})
	if err != nil {
		t.Fatal(err)
	}
	srv := grpc.NewServer(grpc.ChainUnaryInterceptor(ic))
	healthpb.RegisterHealthServer(srv, health.NewServer())
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go func() { _ = srv.Serve(lis) }()
	t.Cleanup(srv.Stop)
	conn := dialConn(t, lis.Addr().String())
	res, err := healthpb.NewHealthClient(conn).Check(t.Context(), &healthpb.HealthCheckRequest{})
	if err != nil || res.GetStatus() != healthpb.HealthCheckResponse_SERVING {
		t.Fatalf("health check without a key: %v, %v; want SERVING", res, err)
	}
}
