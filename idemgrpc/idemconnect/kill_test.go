package idemconnect_test

import (
	"context"
	"net"
	"net/http"
	"testing"

	"connectrpc.com/connect"

	"github.com/idemkit/idem/idemgrpc/idemconnect"
	"github.com/idemkit/idem/idemgrpc/internal/testsvc"
	"github.com/idemkit/idem/internal/testdb"
	"github.com/idemkit/idem/store"
)

func TestMain(m *testing.M) { testsvc.Main(m, serveConnect) }

// serveConnect serves Orders with connect-go (HTTP/1.1, Connect protocol)
// in a kill test's child process.
func serveConnect(d store.Driver[any], a *testsvc.App, crash string, lis net.Listener) error {
	ic, err := idemconnect.NewInterceptor(d, idemconnect.Config{})
	if err != nil {
		return err
	}
	// Outside the idempotency interceptor: it returns after the commit.
	outer := connect.UnaryInterceptorFunc(func(next connect.UnaryFunc) connect.UnaryFunc {
		return func(ctx context.Context, req connect.AnyRequest) (connect.AnyResponse, error) {
			res, err := next(ctx, req)
			if err == nil && crash == testsvc.CrashAfterCommit {
				testsvc.Block()
			}
			return res, err
		}
	})
	mux := http.NewServeMux()
	for path, h := range testsvc.Connect(a, connect.WithInterceptors(outer, ic)) {
		mux.Handle(path, h)
	}
	return http.Serve(lis, mux)
}

// TestKillRestart: the kill test of idemgrpc over Connect — SIGKILL after
// the handler's insert (before the commit) and after the commit (before
// the reply), a restart, a retry with the same key: one order either way.
func TestKillRestart(t *testing.T) {
	for _, name := range testsvc.KillStores {
		t.Run(name, func(t *testing.T) {
			db, parent := testsvc.PrepareStore(t, name)
			for _, crash := range []string{testsvc.CrashAfterWrite, testsvc.CrashAfterCommit} {
				t.Run(crash, func(t *testing.T) {
					testdb.Exec(t, parent, `DELETE FROM orders`)
					key := "k-kill-" + crash

					first := testsvc.StartChild(t, name, db, crash)
					create, _ := testsvc.ConnectClients(http.DefaultClient, "http://"+first.Addr)
					done := make(chan reply, 1)
					go func() { done <- call(t.Context(), create, key, "", testsvc.NewCreate("book", 1, nil)) }()
					if l := first.Next(t); l != "CRASHPOINT" {
						t.Fatalf("child said %q, want CRASHPOINT", l)
					}
					first.Kill9(t)
					if r := <-done; r.err == nil {
						t.Fatal("the call to the killed server succeeded")
					}
					want := map[string]int{testsvc.CrashAfterWrite: 0, testsvc.CrashAfterCommit: 1}[crash]
					if n := testsvc.Rows(t, parent); n != want {
						t.Fatalf("%d orders after the kill, want %d", n, want)
					}

					second := testsvc.StartChild(t, name, db, "")
					create, _ = testsvc.ConnectClients(http.DefaultClient, "http://"+second.Addr)
					retry := call(t.Context(), create, key, "", testsvc.NewCreate("book", 1, nil))
					if retry.err != nil {
						t.Fatal(retry.err)
					}
					if wantReplay := crash == testsvc.CrashAfterCommit; retry.replayed() != wantReplay {
						t.Fatalf("retry replayed %v, want %v", retry.replayed(), wantReplay)
					}
					if n := testdb.Count(t, parent, `SELECT count(*) FROM orders WHERE idem_key = $1`, key); n != 1 || testsvc.Rows(t, parent) != 1 {
						t.Fatalf("%d orders with the key (%d in all), want exactly 1", n, testsvc.Rows(t, parent))
					}
					second.Kill9(t)
				})
			}
		})
	}
}
