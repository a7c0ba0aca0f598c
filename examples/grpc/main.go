// Command grpc is a gRPC service whose Create method is effectively-once
// with idemgrpc, on SQLite: the client retries a call with the same key,
// the server runs the handler once and replays its stored response, and
// the order row and the key record commit in one transaction.
//
//	go run . [database file]
//
// A real service declares Orders in a .proto file and registers the code
// protoc generates; here the service is declared in Go (google.protobuf.Struct
// in and out) so that the example needs no protoc.
package main

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"io"
	"log"
	"net"
	"os"
	"path/filepath"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protodesc"
	"google.golang.org/protobuf/reflect/protoregistry"
	"google.golang.org/protobuf/types/descriptorpb"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/idemkit/idem/idemgrpc"
	"github.com/idemkit/idem/migrate"
	"github.com/idemkit/idem/store/sqlstore"

	_ "modernc.org/sqlite" // the SQLite database/sql driver (the core module links none)
)

const createMethod = "/shop.v1.Orders/Create"

func main() {
	path := filepath.Join(os.TempDir(), "idem-grpc-example.db")
	if len(os.Args) > 1 {
		path = os.Args[1]
	}
	if err := run(context.Background(), path, os.Stdout); err != nil {
		log.Fatal(err)
	}
}

// orders is the service: Create inserts one order on the key's transaction.
type orders struct{}

func (orders) Create(ctx context.Context, in *structpb.Struct) (*structpb.Struct, error) {
	tx, ok := idemgrpc.SQLTx(ctx) // the key's transaction: never commit it
	if !ok {
		return nil, status.Error(codes.Internal, "no idempotency transaction")
	}
	item := in.GetFields()["item"].GetStringValue()
	res, err := tx.ExecContext(ctx, `INSERT INTO orders (item, idem_key) VALUES (?, ?)`, item, idemgrpc.Key(ctx))
	if err != nil {
		return nil, status.Error(codes.Unavailable, err.Error()) // not stored: rolled back, a retry executes
	}
	id, _ := res.LastInsertId()
	return structpb.NewStruct(map[string]any{"id": fmt.Sprintf("ord-%d", id), "item": item})
}

// run serves Orders on loopback, calls Create twice with one key and once
// with that key and another item, and prints what happened.
func run(ctx context.Context, path string, out io.Writer) error {
	d, err := sqlstore.OpenSQLite(path, sqlstore.SQLiteConfig{}, sqlstore.Config{})
	if err != nil {
		return err
	}
	defer d.Close()
	if err := migrate.Up(ctx, d); err != nil {
		return err
	}
	if _, err := d.DB().ExecContext(ctx, `CREATE TABLE IF NOT EXISTS orders (id INTEGER PRIMARY KEY, item TEXT NOT NULL, idem_key TEXT NOT NULL)`); err != nil {
		return err
	}

	idem, err := idemgrpc.UnaryServerInterceptor(d, idemgrpc.Config{})
	if err != nil {
		return err
	}
	srv := grpc.NewServer(grpc.UnaryInterceptor(idem))
	srv.RegisterService(&serviceDesc, orders{})
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return err
	}
	go func() { _ = srv.Serve(lis) }()
	defer srv.Stop()

	conn, err := grpc.NewClient(lis.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithUnaryInterceptor(idemgrpc.UnaryClientInterceptor(idemgrpc.ClientConfig{})))
	if err != nil {
		return err
	}
	defer conn.Close()

	// One logical call, retried by the application with the same key.
	key := fmt.Sprintf("order-%d", os.Getpid())
	ctx = idemgrpc.WithKey(ctx, key)
	book, _ := structpb.NewStruct(map[string]any{"item": "book"})
	for attempt := 1; attempt <= 2; attempt++ {
		var res structpb.Struct
		var header metadata.MD
		if err := conn.Invoke(ctx, createMethod, book, &res, grpc.Header(&header)); err != nil {
			return err
		}
		fmt.Fprintf(out, "attempt %d: order %s, replayed %v\n", attempt, res.GetFields()["id"].GetStringValue(),
			len(header.Get(idemgrpc.MetadataReplayed)) > 0)
	}
	pen, _ := structpb.NewStruct(map[string]any{"item": "pen"})
	err = conn.Invoke(ctx, createMethod, pen, &structpb.Struct{})
	fmt.Fprintf(out, "same key, another item: %v (%s)\n", status.Code(err), idemgrpc.ReasonOf(err))

	var n int
	if err := d.DB().QueryRowContext(ctx, `SELECT count(*) FROM orders WHERE idem_key = ?`, key).Scan(&n); err != nil && !errors.Is(err, sql.ErrNoRows) {
		return err
	}
	fmt.Fprintf(out, "orders with key %s: %d\n", key, n)
	return nil
}

// The service, declared as protoc would from
//
//	service Orders { rpc Create(google.protobuf.Struct) returns (google.protobuf.Struct); }
//
// and registered so that idemgrpc finds the method's idempotency level and
// output type.
var serviceDesc = grpc.ServiceDesc{
	ServiceName: "shop.v1.Orders",
	HandlerType: (*interface {
		Create(context.Context, *structpb.Struct) (*structpb.Struct, error)
	})(nil),
	Methods: []grpc.MethodDesc{{MethodName: "Create", Handler: func(srv any, ctx context.Context, dec func(any) error, ic grpc.UnaryServerInterceptor) (any, error) {
		in := new(structpb.Struct)
		if err := dec(in); err != nil {
			return nil, err
		}
		h := func(ctx context.Context, req any) (any, error) {
			return srv.(orders).Create(ctx, req.(*structpb.Struct))
		}
		if ic == nil {
			return h(ctx, in)
		}
		return ic(ctx, in, &grpc.UnaryServerInfo{Server: srv, FullMethod: createMethod}, h)
	}}},
	Metadata: "shop/v1/orders.proto",
}

func init() {
	fd, err := protodesc.NewFile(&descriptorpb.FileDescriptorProto{
		Name:       proto.String("shop/v1/orders.proto"),
		Package:    proto.String("shop.v1"),
		Syntax:     proto.String("proto3"),
		Dependency: []string{"google/protobuf/struct.proto"},
		Service: []*descriptorpb.ServiceDescriptorProto{{
			Name: proto.String("Orders"),
			Method: []*descriptorpb.MethodDescriptorProto{{Name: proto.String("Create"),
				InputType: proto.String(".google.protobuf.Struct"), OutputType: proto.String(".google.protobuf.Struct")}},
		}},
	}, protoregistry.GlobalFiles)
	if err == nil {
		err = protoregistry.GlobalFiles.RegisterFile(fd)
	}
	if err != nil {
		panic(err)
	}
}
