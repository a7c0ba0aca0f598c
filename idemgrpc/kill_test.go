package idemgrpc_test

import (
	"context"
	"net"
	"testing"

	"google.golang.org/grpc"

	"github.com/idemkit/idem/idemgrpc"
	"github.com/idemkit/idem/idemgrpc/internal/testsvc"
	"github.com/idemkit/idem/internal/testdb"
	"github.com/idemkit/idem/store"
)

func TestMain(m *testing.M) { testsvc.Main(m, serveGRPC) }

// serveGRPC serves Orders over gRPC in a kill test's child process.
func serveGRPC(d store.Driver[any], a *app, crash string, lis net.Listener) error {
	ic, err := idemgrpc.UnaryServerInterceptor(d, idemgrpc.Config{})
	if err != nil {
		return err
	}
	// Outside the idempotency interceptor: it returns after the commit.
	outer := func(ctx context.Context, req any, info *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
		res, err := h(ctx, req)
		if err == nil && crash == testsvc.CrashAfterCommit {
			testsvc.Block()
		}
		return res, err
	}
	srv := grpc.NewServer(grpc.ChainUnaryInterceptor(outer, ic))
	desc, impl := testsvc.GRPC(a)
	srv.RegisterService(desc, impl)
	return srv.Serve(lis)
}

// TestKillRestart kills the server with SIGKILL in the middle of a call —
// after the handler's insert, before the commit; and after the commit,
// before the reply — restarts it, and retries with the same key: the
// first case executes once (the killed transaction left nothing), the
// second replays (the committed record answers); either way the database
// holds exactly one order.
func TestKillRestart(t *testing.T) {
	for _, name := range testsvc.KillStores {
		t.Run(name, func(t *testing.T) {
			db, parent := testsvc.PrepareStore(t, name)
			for _, crash := range []string{testsvc.CrashAfterWrite, testsvc.CrashAfterCommit} {
				t.Run(crash, func(t *testing.T) {
					testdb.Exec(t, parent, `DELETE FROM orders`)
					key := "k-kill-" + crash
					ctx := withKey(t.Context(), key, "")

					first := testsvc.StartChild(t, name, db, crash)
					done := make(chan reply, 1)
					go func() { done <- create(ctx, dialConn(t, first.Addr), testsvc.NewCreate("book", 1, nil)) }()
					if l := first.Next(t); l != "CRASHPOINT" {
						t.Fatalf("child said %q, want CRASHPOINT", l)
					}
					first.Kill9(t)
					if r := <-done; r.err == nil {
						t.Fatal("the call to the killed server succeeded")
					}
					want := map[string]int{testsvc.CrashAfterWrite: 0, testsvc.CrashAfterCommit: 1}[crash]
					if n := rows(t, parent); n != want {
						t.Fatalf("%d orders after the kill, want %d", n, want)
					}

					second := testsvc.StartChild(t, name, db, "")
					conn := dialConn(t, second.Addr)
					retry := create(ctx, conn, testsvc.NewCreate("book", 1, nil))
					if retry.err != nil {
						t.Fatal(retry.err)
					}
					if wantReplay := crash == testsvc.CrashAfterCommit; retry.replayed() != wantReplay {
						t.Fatalf("retry replayed %v, want %v", retry.replayed(), wantReplay)
					}
					again := create(ctx, conn, testsvc.NewCreate("book", 1, nil))
					if again.err != nil || !again.replayed() || testsvc.String(again.order, "id") != testsvc.String(retry.order, "id") {
						t.Fatalf("second retry: %v, replayed %v", again.err, again.replayed())
					}
					if n := testdb.Count(t, parent, `SELECT count(*) FROM orders WHERE idem_key = $1`, key); n != 1 || rows(t, parent) != 1 {
						t.Fatalf("%d orders with the key (%d in all), want exactly 1", n, rows(t, parent))
					}
					second.Kill9(t)
				})
			}
		})
	}
}
